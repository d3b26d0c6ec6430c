// Server reflection through a standard client (grpc-js-reflection-client on
// @grpc/grpc-js), over both protocol versions: every service is listed and
// described, the standard health service included.
//   GPUCOMPUTE_SERVER=build/server/gpucompute-server node --test tests/reflection
'use strict';

const assert = require('node:assert');
const { spawn } = require('node:child_process');
const { after, before, test } = require('node:test');
const grpc = require('@grpc/grpc-js');
const { GrpcReflection } = require('grpc-js-reflection-client');

const SERVICES = [
  'gpucompute.v1.Buffers',
  'gpucompute.v1.Compute',
  'gpucompute.v1.Server',
  'gpucompute.v1.SharedMemory',
  'grpc.health.v1.Health',
  'grpc.reflection.v1.ServerReflection',
  'grpc.reflection.v1alpha.ServerReflection',
];

let server;
let address;

// Starts the server on a port of the kernel's choosing and reads it from the log.
before(async () => {
  const binary = process.env.GPUCOMPUTE_SERVER;
  assert.ok(binary, 'set GPUCOMPUTE_SERVER to the gpucompute-server binary');
  server = spawn(binary, ['--address=127.0.0.1:0', '--metrics_address=', '--backend=cpu'],
                 { stdio: ['ignore', 'ignore', 'pipe'] });
  address = await new Promise((resolve, reject) => {
    let log = '';
    server.stderr.on('data', (data) => {
      log += data;
      const serving = /serving gRPC on \S+ \(port (\d+)\)/.exec(log);
      if (serving) resolve(`127.0.0.1:${serving[1]}`);
    });
    server.on('exit', (code) => reject(new Error(`server exited with ${code}:\n${log}`)));
  });
});

after(() => server.kill('SIGKILL'));

for (const version of ['v1', 'v1alpha']) {
  const client = () =>
    new GrpcReflection(address, grpc.ChannelCredentials.createInsecure(), {}, version);

  test(`${version}: lists every service`, async () => {
    assert.deepStrictEqual((await client().listServices()).sort(), SERVICES);
  });

  test(`${version}: describes grpc.health.v1.Health`, async () => {
    const methods = await client().listMethods('grpc.health.v1.Health');
    assert.deepStrictEqual(methods.map((m) => m.name), ['Check', 'Watch']);
  });

  test(`${version}: describes gpucompute.v1.Compute`, async () => {
    const methods = await client().listMethods('gpucompute.v1.Compute');
    assert.deepStrictEqual(methods.map((m) => m.name),
                           ['DiscountProduct', 'HaversineGrid', 'Normalize', 'LombScargle']);
  });

  test(`${version}: every listed service can be described`, async () => {
    for (const service of SERVICES) {
      const descriptor = await client().getDescriptorBySymbol(service);
      assert.ok(descriptor.getProtobufJsRoot().lookupService(service), service);
    }
  });

  test(`${version}: an unknown symbol is NOT_FOUND`, async () => {
    await assert.rejects(client().getDescriptorBySymbol('no.such.Service'), /not found/i);
  });
}
