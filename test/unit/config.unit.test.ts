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
