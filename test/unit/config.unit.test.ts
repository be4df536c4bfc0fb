/** infra/config.ts: what the environment may say, refused at start with a line naming the variable. */
import { ConfigError, loadConfig } from '../../infra/config.js';

const problemsOf = (env: Record<string, string>): string[] => {
  try {
    loadConfig({ DATA_DIR: '/tmp/ais-config-unit-never-made', ...env });
    return [];
  } catch (err) {
    if (err instanceof ConfigError) return err.problems;
    throw err;
  }
};

describe('PUBLIC_URL', () => {
  it('is an origin: a trailing slash is dropped; a path, query, fragment or user is refused (links kept or dropped them at random)', () => {
    expect(loadConfig({ DATA_DIR: '/tmp/ais-config-unit-never-made', PUBLIC_URL: 'https://id.example.com/' }).publicUrl).toBe('https://id.example.com');
    expect(loadConfig({ DATA_DIR: '/tmp/ais-config-unit-never-made', PUBLIC_URL: 'http://localhost:8000' }).publicUrl).toBe('http://localhost:8000');
    for (const bad of ['https://id.example.com/ais', 'https://id.example.com/ais/', 'https://id.example.com/?x=1', 'https://id.example.com/#frag', 'https://me:secret@id.example.com']) {
      const problems = problemsOf({ PUBLIC_URL: bad });
      expect([bad, problems]).toEqual([bad, [expect.stringMatching(/^PUBLIC_URL must be an origin/)]]);
      expect(problems.join()).not.toContain('secret');
    }
  });
});

describe('SMTP_RELAY_URL', () => {
  it('a password with an unencoded # is refused with the way out, never shown (it parsed as another host)', () => {
    for (const bad of ['smtp://mailer:1#2@relay.example.com:587', 'smtp://mailer:se#cret@relay.example.com']) {
      const problems = problemsOf({ SMTP_RELAY_URL: bad });
      expect([bad, problems]).toEqual([bad, [expect.stringMatching(/^SMTP_RELAY_URL .*percent-encoded \(%23 %2F %3F %40 %3A\)/)]]);
      expect([bad, problems.join()]).toEqual([bad, expect.not.stringMatching(/1#2|se#cret/)]);
    }
    expect(loadConfig({ DATA_DIR: '/tmp/ais-config-unit-never-made', SMTP_RELAY_URL: 'smtp://mailer:p%40ss%231@relay.example.com:587' }).smtpRelayUrl).toBe('smtp://mailer:p%40ss%231@relay.example.com:587');
  });
});

describe('warnings: valid settings that do nothing, or less than they seem', () => {
  const warningsOf = (env: Record<string, string>) => loadConfig({ DATA_DIR: '/tmp/ais-config-unit-never-made', ...env }).warnings;

  it('none for the defaults, or for settings that are used', () => {
    expect(warningsOf({})).toEqual([]);
    expect(warningsOf({ SMS_PROVIDER: 'twilio', TWILIO_ACCOUNT_SID: 'AC1', TWILIO_AUTH_TOKEN: 't', ADMIN_TOKEN: 'a'.repeat(16), SMTP_HOST: '0.0.0.0' })).toEqual([]);
  });

  it('names each unused setting and why, and short operator tokens', () => {
    expect(warningsOf({ TWILIO_ACCOUNT_SID: 'AC1', TWILIO_AUTH_TOKEN: 't' })).toEqual(['TWILIO_ACCOUNT_SID, TWILIO_AUTH_TOKEN are set but not used: SMS_PROVIDER is not twilio']);
    expect(warningsOf({ DKIM_DOMAIN: 'example.com' })).toEqual(['DKIM_DOMAIN is set but not used: mail is DKIM-signed only with DKIM_SELECTOR and DKIM_PRIVATE_KEY_FILE']);
    expect(warningsOf({ SMTP_PORT: '0', SMTP_HOST: '0.0.0.0' })).toEqual(['SMTP_HOST is set but not used: SMTP_PORT=0 (no SMTP listener)']);
    expect(warningsOf({ MONGO_URL: 'mongodb://m:27017' })).toEqual(['MONGO_URL is set but not used: STORE is not cluster (the embedded store under DATA_DIR is used)']);
    expect(warningsOf({ EMAIL_LIMIT_HOUR: '100', EMAIL_LIMIT_DAY: '10' })).toEqual(['EMAIL_LIMIT_HOUR is above EMAIL_LIMIT_DAY: the day limit is the one that holds']);
    const short = warningsOf({ ADMIN_TOKEN: 'x', METRICS_TOKEN: 'short-token' });
    expect(short).toEqual([expect.stringMatching(/^ADMIN_TOKEN is shorter than 16 characters/), expect.stringMatching(/^METRICS_TOKEN is shorter than 16 characters/)]);
    expect(short.join()).not.toContain('short-token');
  });
});
