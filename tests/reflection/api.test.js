// Any gRPC client can call the service: Node's @grpc/grpc-js with stubs loaded by
// @grpc/proto-loader from proto/ calls health, reads ServerInfo, runs each of the
// four operations and a buffer round trip, and checks results against float64
// references computed here.
//   GPUCOMPUTE_SERVER=build/server/gpucompute-server node --test tests/reflection
'use strict';

const assert = require('node:assert');
const path = require('node:path');
const { after, before, test } = require('node:test');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
const { startServer } = require('./server');

const PROTO_ROOT = path.join(__dirname, '..', '..', 'proto');
const definition = protoLoader.loadSync(
  ['gpucompute/v1/gpucompute.proto', 'grpc/health/v1/health.proto'],
  { includeDirs: [PROTO_ROOT], keepCase: true, longs: Number, enums: String, defaults: true });
const api = grpc.loadPackageDefinition(definition);

let server;
let stubs;

before(async () => {
  let address;
  ({ process: server, address } = await startServer());
  const credentials = grpc.credentials.createInsecure();
  stubs = {
    health: new api.grpc.health.v1.Health(address, credentials),
    server: new api.gpucompute.v1.Server(address, credentials),
    compute: new api.gpucompute.v1.Compute(address, credentials),
    buffers: new api.gpucompute.v1.Buffers(address, credentials),
  };
});

after(() => server.kill('SIGKILL'));

const unary = (stub, method, request) => new Promise((resolve, reject) => {
  stub[method](request, (error, reply) => (error ? reject(error) : resolve(reply)));
});

// A result stream reassembled: header, data chunks at their offsets, trailer.
const result = (stub, method, request) => new Promise((resolve, reject) => {
  const chunks = [];
  let header;
  let trailer;
  const call = stub[method](request);
  call.on('data', (chunk) => {
    if (chunk.header) header = chunk.header;
    if (chunk.data) chunks.push(chunk.data);
    if (chunk.trailer) trailer = chunk.trailer;
  });
  call.on('error', reject);
  call.on('end', () => {
    let offset = 0;
    for (const c of chunks) {
      assert.strictEqual(Number(c.offset), offset, 'chunks arrive in order');
      offset += c.data.length;
    }
    const bytes = Buffer.concat(chunks.map((c) => c.data));
    assert.strictEqual(bytes.length, Number(header.total_bytes));
    resolve({ header, trailer, values: new Float64Array(bytes.buffer, bytes.byteOffset, bytes.length / 8) });
  });
});

const tensor = (values, shape) => ({
  dtype: 'FLOAT64', shape, data: Buffer.from(Float64Array.from(values).buffer),
});
const random = (n) => Array.from({ length: n }, () => Math.random() + 0.1);

function assertClose(actual, expected, rtol) {
  assert.strictEqual(actual.length, expected.length);
  for (let i = 0; i < expected.length; i++) {
    const tolerance = rtol * Math.max(Math.abs(expected[i]), 1e-300);
    assert.ok(Math.abs(actual[i] - expected[i]) <= tolerance,
              `element ${i}: ${actual[i]} vs ${expected[i]}`);
  }
}

test('health is SERVING', async () => {
  assert.strictEqual((await unary(stubs.health, 'Check', { service: '' })).status, 'SERVING');
});

test('ServerInfo names the four operations, StreamingCompute and an instance id', async () => {
  const info = await unary(stubs.server, 'GetInfo', {});
  assert.deepStrictEqual(info.operations.map((o) => o.name),
                         ['DiscountProduct', 'HaversineGrid', 'Normalize', 'LombScargle',
                          'StreamingCompute']);
  assert.match(info.instance_id, /^[0-9a-f]{8}$/);
});

test('DiscountProduct broadcasts (M, O) x (D, M, O) exactly', async () => {
  const factors = random(2 * 3);
  const values = random(4 * 2 * 3);
  const out = await result(stubs.compute, 'DiscountProduct', {
    factors: { tensor: tensor(factors, [2, 3]) }, values: { tensor: tensor(values, [4, 2, 3]) },
  });
  assert.deepStrictEqual(out.header.shape.map(Number), [4, 2, 3]);
  assert.deepStrictEqual(Array.from(out.values), values.map((v, i) => factors[i % 6] * v));
});

test('HaversineGrid over a mesh matches the formula', async () => {
  const out = await result(stubs.compute, 'HaversineGrid', {
    mesh: { lat_start: 29, lat_stop: 31, n_lat: 3, lon_start: 99, lon_stop: 101, n_lon: 4,
            dtype: 'FLOAT64' },
    references: [{ lat: 30, lon: 101 }],
  });
  const R = 6371.0088;
  const rad = Math.PI / 180;
  const expected = [];
  for (let i = 0; i < 3; i++) {
    for (let j = 0; j < 4; j++) {
      const lat = 29 + i;
      const lon = 99 + (2 * j) / 3;
      const h = Math.sin(((lat - 30) * rad) / 2) ** 2 +
                Math.cos(lat * rad) * Math.cos(30 * rad) * Math.sin(((lon - 101) * rad) / 2) ** 2;
      expected.push(2 * R * Math.atan2(Math.sqrt(h), Math.sqrt(1 - h)));
    }
  }
  assertClose(Array.from(out.values), expected, 1e-12);
});

test('Normalize divides each row by its sum', async () => {
  const a = random(2 * 5);
  const out = await result(stubs.compute, 'Normalize', { input: { tensor: tensor(a, [2, 5]) } });
  const sums = [0, 1].map((r) => a.slice(5 * r, 5 * r + 5).reduce((s, v) => s + v, 0));
  assertClose(Array.from(out.values), a.map((v, i) => v / sums[Math.floor(i / 5)]), 1e-14);
});

test('LombScargle matches the classic periodogram', async () => {
  const x = Array.from({ length: 64 }, (_, i) => i * 0.37 + 0.05 * Math.sin(i));
  const y = x.map((t) => Math.sin(1.3 * t));
  const freqs = [0.5, 1.0, 1.3, 2.0];
  const out = await result(stubs.compute, 'LombScargle', {
    x: { tensor: tensor(x, [64]) }, y: { tensor: tensor(y, [64]) },
    freqs: { tensor: tensor(freqs, [4]) },
  });
  const expected = freqs.map((w) => {
    const tau = Math.atan2(x.reduce((s, t) => s + Math.sin(2 * w * t), 0),
                           x.reduce((s, t) => s + Math.cos(2 * w * t), 0)) / (2 * w);
    let yc = 0; let ys = 0; let cc = 0; let ss = 0;
    x.forEach((t, k) => {
      const c = Math.cos(w * (t - tau));
      const s = Math.sin(w * (t - tau));
      yc += y[k] * c; ys += y[k] * s; cc += c * c; ss += s * s;
    });
    return 0.5 * ((yc * yc) / cc + (ys * ys) / ss);
  });
  assertClose(Array.from(out.values), expected, 1e-9);
});

test('a buffer round trip: upload, compute on it, download, delete', async () => {
  const a = random(3 * 4);
  const info = await new Promise((resolve, reject) => {
    const call = stubs.buffers.Upload((error, reply) => (error ? reject(error) : resolve(reply)));
    const bytes = tensor(a, [3, 4]).data;
    call.write({ header: { name: 'node', dtype: 'FLOAT64', shape: [3, 4] } });
    call.write({ data: bytes.subarray(0, 40) });
    call.write({ data: bytes.subarray(40) });
    call.end();
  });
  assert.match(info.id, /^[0-9a-f]{32}$/);
  const back = await result(stubs.buffers, 'Download', { buffer_id: info.id });
  assert.deepStrictEqual(Array.from(back.values), a);
  const normalized = await result(stubs.compute, 'Normalize', {
    input: { buffer_id: info.id }, norm: 'NORM_MAX_ABS',
  });
  const maxima = [0, 1, 2].map((r) => Math.max(...a.slice(4 * r, 4 * r + 4)));
  assertClose(Array.from(normalized.values), a.map((v, i) => v / maxima[Math.floor(i / 4)]), 1e-15);
  assert.strictEqual(Number((await unary(stubs.buffers, 'Delete', { buffer_id: info.id })).freed_bytes), 96);
  await assert.rejects(unary(stubs.buffers, 'Delete', { buffer_id: info.id }),
                       (e) => e.code === grpc.status.NOT_FOUND);
});
