// Server reflection through a standard client (grpc-js-reflection-client on
// @grpc/grpc-js), over both protocol versions: every service is listed and
// described, the standard health service included.
//   GPUCOMPUTE_SERVER=build/server/gpucompute-server node --test tests/reflection
'use strict';

const assert = require('node:assert');
const { after, before, test } = require('node:test');
const grpc = require('@grpc/grpc-js');
const { GrpcReflection } = require('grpc-js-reflection-client');
const { startServer } = require('./server');

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

before(async () => {
  ({ process: server, address } = await startServer());
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
                           ['DiscountProduct', 'HaversineGrid', 'Normalize', 'LombScargle',
                            'StreamingCompute', 'Session']);
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
