// The real server for the Node tests: CPU backend, a port of the kernel's choosing
// read from its log, and any further flags. Resolves to { process, address }.
'use strict';

const assert = require('node:assert');
const { spawn } = require('node:child_process');

async function startServer(flags = []) {
  const binary = process.env.GPUCOMPUTE_SERVER;
  assert.ok(binary, 'set GPUCOMPUTE_SERVER to the gpucompute-server binary');
  const child = spawn(binary, ['--address=127.0.0.1:0', '--metrics_address=', '--backend=cpu',
                               ...flags],
                      { stdio: ['ignore', 'ignore', 'pipe'] });
  const address = await new Promise((resolve, reject) => {
    let log = '';
    child.stderr.on('data', (data) => {
      log += data;
      const serving = /serving gRPC on \S+ \(port (\d+)\)/.exec(log);
      if (serving) resolve(`127.0.0.1:${serving[1]}`);
    });
    child.on('exit', (code) => reject(new Error(`server exited with ${code}:\n${log}`)));
  });
  return { process: child, address };
}

module.exports = { startServer };
