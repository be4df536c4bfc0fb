// `ais pin setup|change|recover`: the vault PIN.
import { changePin, recover, setupEncryption } from '../../sdk/crypto.js';
import { configFile, loadConfig, updateConfig } from '../config.js';
import { actsAsStoredLogin, client, type Command } from '../context.js';
import { CliError, EXIT } from '../errors.js';
import { readSecret } from '../input.js';
import { show } from '../output.js';
import { DEVICE_SECRET_HELP, deviceSecret, foreignSetup, kdfOverride, lockStore, metadataFor } from '../vault.js';

export const pinCommands: Record<string, Command> = {
  'pin setup': {
    usage: 'ais pin setup   (PIN: AIS_PIN or stdin)',
    summary: 'First-time vault encryption: derive keys from a 6-digit PIN; prints the recovery key ONCE.',
    env: { AIS_PIN: 'the new 6-digit PIN (else stdin, else a prompt)', AIS_PIN_KDF: 'Argon2id parameters for tests or small devices, e.g. argon2id:m=19456,t=2,p=1 (never below that floor; default m=65536,t=3,p=1)' },
    async run(ctx) {
      const c = client(ctx);
      const meta = await c.encryption.get();
      const shown = (recoveryKey: string, deviceSecret: string, saved: boolean) =>
        show(ctx, { recovery_key: recoveryKey, device_secret: deviceSecret, device_secret_saved: saved }, () =>
          `PIN set. Recovery key (shown once; store it safely):\n\n  ${recoveryKey}\n\nDevice secret (needed with the PIN on other machines; ${saved ? `saved in ${configFile(ctx.env)}` : 'not saved here (no login of this account is stored here): keep it, and give it as AIS_DEVICE_SECRET'}):\n\n  ${deviceSecret}`,
        );
      const pending = loadConfig(ctx.env).pending_setup;
      if (meta.public_key) {
        // A setup of this machine cut off after its upload landed: its keys are here, shown now.
        // Its device secret: kept in the setup when a login of another account came since.
        const madeSecret = pending?.device_secret ?? ctx.config.device_secret;
        if (pending && pending.public_key === meta.public_key && madeSecret) {
          ctx.config = await updateConfig(ctx.env, ({ pending_setup: _done, ...stored }) => stored);
          await lockStore(ctx, meta.salt).write({ failures: 0 });
          const saved = madeSecret === ctx.config.device_secret;
          const where = saved ? `saved in ${configFile(ctx.env)}` : 'not saved here: give it as AIS_DEVICE_SECRET';
          // The PIN is the one that run was given (no new one is read or set here).
          return show(ctx, { recovery_key: pending.recovery_key, device_secret: madeSecret, device_secret_saved: saved, resumed: true }, () =>
            `An earlier \`ais pin setup\` was cut off after it set the PIN: the PIN is the one given to it then (not changed now).\nIts recovery key (shown once; store it safely):\n\n  ${pending.recovery_key}\n\nDevice secret (${where}):\n\n  ${madeSecret}`,
          );
        }
        if (!meta.wrapped_key) throw foreignSetup();
        throw new CliError('already_set_up', 'A PIN is already set up for this account: use `ais pin change` or `ais pin recover`.', EXIT.api_error);
      }
      const pin = await readSecret(ctx, 'AIS_PIN', 'New 6-digit PIN', { confirm: true });
      // The device secret is kept only beside the stored login of this same account at this
      // service (as `pin recover` keeps it): another account's login has a vault of its own,
      // which its saved secret must go on opening. Else a new one, printed to keep (not the
      // stored login's, which is not this account's to be given).
      const keep = await actsAsStoredLogin(ctx, c);
      const s = await setupEncryption({ pin, salt: meta.salt, deviceSecret: keep ? ctx.config.device_secret : undefined, kdf: kdfOverride(ctx) });
      // Kept before the upload: a setup cut off after it (a crash, a lost answer) would leave a
      // PIN whose device secret and recovery key are nowhere, a vault nobody can open. One not
      // kept here rides in the pending setup only, gone once it is shown.
      const underWay = { recovery_key: s.recoveryKey, public_key: s.upload.public_key };
      ctx.config = await updateConfig(ctx.env, (stored) =>
        keep ? { ...stored, device_secret: s.deviceSecret, pending_setup: underWay } : { ...stored, pending_setup: { ...underWay, device_secret: s.deviceSecret } },
      );
      await c.encryption.setup(s.upload);
      ctx.config = await updateConfig(ctx.env, ({ pending_setup: _done, ...stored }) => stored);
      await lockStore(ctx, meta.salt).write({ failures: 0 });
      shown(s.recoveryKey, s.deviceSecret, keep);
    },
  },
  'pin change': {
    usage: 'ais pin change   (AIS_PIN = current, AIS_NEW_PIN = new; or two stdin lines)',
    summary: 'Change the PIN (the vault key is re-wrapped; entries stay as they are).',
    env: { AIS_PIN: 'the current PIN', AIS_NEW_PIN: 'the new PIN (else two stdin lines: current, new)', AIS_DEVICE_SECRET: DEVICE_SECRET_HELP },
    async run(ctx) {
      const c = client(ctx);
      const metadata = await metadataFor(c);
      const pin = await readSecret(ctx, 'AIS_PIN', 'Current PIN');
      const newPin = await readSecret(ctx, 'AIS_NEW_PIN', 'New PIN', { confirm: true });
      const { upload } = await changePin({ pin, newPin, deviceSecret: deviceSecret(ctx), metadata, lockStore: lockStore(ctx, metadata.salt) });
      await c.encryption.rewrap(upload);
      show(ctx, { changed: true }, () => 'PIN changed.');
    },
  },
  'pin recover': {
    usage: 'ais pin recover   (AIS_RECOVERY_KEY, AIS_NEW_PIN; or two stdin lines)',
    summary: 'Set a new PIN with the recovery key (also clears a pin_locked vault).',
    env: { AIS_RECOVERY_KEY: 'the recovery key (RK1-...)', AIS_NEW_PIN: 'the new PIN (else two stdin lines: key, PIN)', AIS_DEVICE_SECRET: 'the device secret of the vault, when this machine has none saved (without it, recovery makes a NEW one that every other machine then needs)' },
    async run(ctx) {
      const c = client(ctx);
      const metadata = await metadataFor(c);
      const recoveryKey = await readSecret(ctx, 'AIS_RECOVERY_KEY', 'Recovery key');
      const newPin = await readSecret(ctx, 'AIS_NEW_PIN', 'New PIN', { confirm: true });
      const known = ctx.env.AIS_DEVICE_SECRET || ctx.config.device_secret;
      const r = await recover({ recoveryKey, newPin, metadata, deviceSecret: known, lockStore: lockStore(ctx, metadata.salt) });
      await c.encryption.rewrap(r.upload);
      // Kept only beside the stored login of this same account (never over another account's,
      // nor in a config of an AIS_API_KEY run alone): else printed for the caller to keep.
      const saved = await actsAsStoredLogin(ctx, c);
      if (saved && r.deviceSecret !== ctx.config.device_secret) ctx.config = await updateConfig(ctx.env, (stored) => ({ ...stored, device_secret: r.deviceSecret }));
      // Without the old device secret the vault key is now wrapped under a new one: every other
      // machine needs it (else its PIN no longer opens the vault), so say so, loudly.
      show(ctx, { recovered: true, device_secret: r.deviceSecret, new_device_secret: !known, device_secret_saved: saved }, () =>
        known
          ? 'PIN reset; the vault is unlocked again.'
          : [
              `PIN reset; the vault is unlocked again, under a NEW device secret (this machine had none)${saved ? '' : ', not saved here (no login of this account is stored here): give it as AIS_DEVICE_SECRET'}:`,
              `  ${r.deviceSecret}`,
              'Your other machines need it to unlock: set AIS_DEVICE_SECRET there (or run `ais pin recover` there with AIS_DEVICE_SECRET set).',
            ].join('\n'),
      );
    },
  },
};
