// Preloaded by `npm start` (node --require ./infra/boot.cjs ...) before anything touches
// libuv's thread pool, whose size is read once when the pool starts. (An ESM --import is
// too late: loading it already starts the pool.)
// Password hashing (argon2id, 19 MiB each), file I/O (blobs) and crypto share that pool; with
// the default 4 threads, concurrent sign-ins queue behind each other. An explicit setting wins.
'use strict';
const { availableParallelism } = require('node:os');

// Set but empty or no whole number from 1 to 1024 (libuv's range): the default, as for every other variable.
const asked = Number(process.env.UV_THREADPOOL_SIZE);
if (!(Number.isInteger(asked) && asked >= 1 && asked <= 1024)) process.env.UV_THREADPOOL_SIZE = String(Math.max(8, 4 * availableParallelism()));
