// Every command, in the order `ais --help` lists them. A group is one file here.
import type { Command } from '../context.js';
import { authCommands } from './auth.js';
import { identitiesCommands } from './identities.js';
import { keysCommands } from './keys.js';
import { mailCommands } from './mail.js';
import { passwordsCommands } from './passwords.js';
import { pinCommands } from './pin.js';
import { secretsCommands } from './secrets.js';
import { smsCommands } from './sms.js';

export const commands: Record<string, Command> = {
  ...authCommands,
  ...identitiesCommands,
  ...keysCommands,
  ...mailCommands,
  ...smsCommands,
  ...pinCommands,
  ...passwordsCommands,
  ...secretsCommands,
};
