// Errors carry a machine-readable reason any client can read: the
// grpc-status-details-bin trailer holds a google.rpc.Status whose details hold a
// google.rpc.ErrorInfo, decoded here with protobufjs from the vendored protos.
//   GPUCOMPUTE_SERVER=build/server/gpucompute-server node --test tests/reflection
'use strict';

const assert = require('node:assert');
const fs = require('node:fs');
const path = require('node:path');
const { after, before, test } = require('node:test');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
const protobuf = require('protobufjs');
const { startServer } = require('./server');

const PROTO_ROOT = path.join(__dirname, '..', '..', 'proto');
const api = grpc.loadPackageDefinition(protoLoader.loadSync(
  ['gpucompute/v1/gpucompute.proto'],
  { includeDirs: [PROTO_ROOT], keepCase: true, longs: Number, enums: String, defaults: true }));

const rpc = new protobuf.Root();
rpc.resolvePath = (origin, target) => {
  const vendored = path.join(PROTO_ROOT, target);
  return fs.existsSync(vendored) ? vendored : protobuf.util.path.resolve(origin, target);
};
rpc.loadSync(['google/rpc/status.proto', 'google/rpc/error_details.proto']);
const Status = rpc.lookupType('google.rpc.Status');
const ErrorInfo = rpc.lookupType('google.rpc.ErrorInfo');

const QUOTA = 65536;
let server;
let stubs;

before(async () => {
  let address;
  ({ process: server, address } = await startServer([`--buffer_quota_bytes=${QUOTA}`]));
  const credentials = grpc.credentials.createInsecure();
  stubs = {
    server: new api.gpucompute.v1.Server(address, credentials),
    compute: new api.gpucompute.v1.Compute(address, credentials),
    buffers: new api.gpucompute.v1.Buffers(address, credentials),
  };
});

after(() => server.kill('SIGKILL'));

// The ErrorInfo of a failed call's error.
function errorInfo(error) {
  const [details] = error.metadata.get('grpc-status-details-bin');
  assert.ok(details, `no status details: ${error.message}`);
  const status = Status.decode(details);
  assert.strictEqual(status.code, error.code);
  const any = status.details.find((d) => d.type_url.endsWith('/google.rpc.ErrorInfo'));
  assert.ok(any, 'no ErrorInfo');
  const info = ErrorInfo.decode(any.value);
  assert.strictEqual(info.domain, 'gpucompute.dev');
  return info;
}

// The error a server-streaming call ends with.
const failure = (stub, method, request) => new Promise((resolve, reject) => {
  const call = stub[method](request);
  call.on('data', () => {});
  call.on('error', resolve);
  call.on('end', () => reject(new Error(`${method} succeeded`)));
});

const instance = () => new Promise((resolve, reject) => {
  stubs.server.GetInfo({}, (error, info) => (error ? reject(error) : resolve(info.instance_id)));
});

test('a missing buffer is BUFFER_NOT_FOUND', async () => {
  const id = `${await instance()}${'0'.repeat(24)}`;
  const error = await failure(stubs.buffers, 'Download', { buffer_id: id });
  assert.strictEqual(error.code, grpc.status.NOT_FOUND);
  const info = errorInfo(error);
  assert.strictEqual(info.reason, 'BUFFER_NOT_FOUND');
  assert.strictEqual(info.metadata.field, 'buffer_id');
});

test("another replica's buffer is BUFFER_ON_OTHER_REPLICA naming its owner", async () => {
  const own = await instance();
  const owner = own === '0badcafe' ? '1badcafe' : '0badcafe';
  const error = await failure(stubs.buffers, 'Download', { buffer_id: `${owner}${'a'.repeat(24)}` });
  assert.strictEqual(error.code, grpc.status.FAILED_PRECONDITION);
  const info = errorInfo(error);
  assert.strictEqual(info.reason, 'BUFFER_ON_OTHER_REPLICA');
  assert.strictEqual(info.metadata.owner_instance, owner);
  assert.strictEqual(info.metadata.instance, own);
});

test('an over-quota upload is QUOTA_EXCEEDED with the limit', async () => {
  const error = await new Promise((resolve, reject) => {
    const call = stubs.buffers.Upload((e) => (e ? resolve(e) : reject(new Error('stored'))));
    call.write({ header: { name: 'big', dtype: 'FLOAT64', shape: [16384] } });
    call.write({ data: Buffer.alloc(16384 * 8) });
    call.end();
  });
  assert.strictEqual(error.code, grpc.status.RESOURCE_EXHAUSTED);
  const info = errorInfo(error);
  assert.strictEqual(info.reason, 'QUOTA_EXCEEDED');
  assert.strictEqual(info.metadata.limit, String(QUOTA));
});

test('a result too large for one message is RESULT_TOO_LARGE_FOR_ONE_MESSAGE', async () => {
  const request = {
    input: { tensor: { dtype: 'FLOAT64', shape: [1, 2048], data: Buffer.alloc(2048 * 8) } },
    output: { single_message: true, chunk_bytes: 4096 },
  };
  const error = await failure(stubs.compute, 'Normalize', request);
  assert.strictEqual(error.code, grpc.status.FAILED_PRECONDITION);
  const info = errorInfo(error);
  assert.strictEqual(info.reason, 'RESULT_TOO_LARGE_FOR_ONE_MESSAGE');
  assert.strictEqual(info.metadata.limit, '4096');
});
