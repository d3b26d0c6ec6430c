// Any-language affinity through the shipped HAProxy configuration (deploy/haproxy/):
// a real HAProxy (Debian's) in front of three CPU replicas on 127.0.0.2-4, found through
// SRV records served by a real dnsmasq, as a Kubernetes headless Service publishes them.
// A plain @grpc/grpc-js client that knows nothing of replicas sets x-gpucompute-affinity.
//   GPUCOMPUTE_SERVER=build/server/gpucompute-server node --test tests/deploy/haproxy.test.js
'use strict';

const assert = require('node:assert');
const { spawn } = require('node:child_process');
const crypto = require('node:crypto');
const dgram = require('node:dgram');
const fs = require('node:fs');
const { createRequire } = require('node:module');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');
const { after, before, test } = require('node:test');

// The Node packages scripts/dev.sh installs for the Node client tests.
const requireTests = createRequire(path.join(__dirname, '..', 'reflection', 'package.json'));
const grpc = requireTests('@grpc/grpc-js');
const protoLoader = requireTests('@grpc/proto-loader');
const protobuf = requireTests('protobufjs');

const REPO = path.join(__dirname, '..', '..');
const definition = protoLoader.loadSync(['gpucompute/v1/gpucompute.proto'], {
  includeDirs: [path.join(REPO, 'proto')], keepCase: true, longs: Number, enums: String,
  defaults: true,
});
const api = grpc.loadPackageDefinition(definition).gpucompute.v1;
// The error details (google.rpc.Status holding an ErrorInfo), from the vendored protos.
const rpc = new protobuf.Root();
rpc.resolvePath = (origin, target) => {
  const vendored = path.join(REPO, 'proto', target);
  return fs.existsSync(vendored) ? vendored : protobuf.util.path.resolve(origin, target);
};
rpc.loadSync(['google/rpc/status.proto', 'google/rpc/error_details.proto']);
const RpcStatus = rpc.lookupType('google.rpc.Status');
const ErrorInfo = rpc.lookupType('google.rpc.ErrorInfo');
const AFFINITY = 'x-gpucompute-affinity';
const HOSTS = ['127.0.0.2', '127.0.0.3', '127.0.0.4'];
const SRV_NAME = '_grpc._tcp.replicas.gpucompute.test';
const CHANNEL = { 'grpc.max_receive_message_length': -1, 'grpc.max_send_message_length': -1 };
const KEYS = Array.from({ length: 12 }, (_, i) => `job-${i}`);

const children = [];
let replicas;  // [{ host, port, address, process, instance }]
let proxyAddress;
let statsSocket;

function start(command, args, ready) {
  const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  children.push(child);
  let log = '';
  return new Promise((resolve, reject) => {
    const onData = (data) => {
      log += data;
      const found = ready && ready(log);
      if (found) resolve({ process: child, found, log: () => log });
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    child.on('exit', (code) => reject(new Error(`${command} exited with ${code}:\n${log}`)));
    if (!ready) resolve({ process: child, log: () => log });
  });
}

const freePort = (kind) => new Promise((resolve, reject) => {
  if (kind === 'udp') {
    const socket = dgram.createSocket('udp4');
    socket.bind(0, '127.0.0.1', () => {
      const { port } = socket.address();
      socket.close(() => resolve(port));
    });
    socket.on('error', reject);
    return;
  }
  const server = net.createServer();
  server.listen(0, '127.0.0.1', () => {
    const { port } = server.address();
    server.close(() => resolve(port));
  });
  server.on('error', reject);
});

// The runtime API's "show servers state": { backend: [{ name, addr, up }] }.
const serversState = () => new Promise((resolve, reject) => {
  const socket = net.connect(statsSocket);
  let text = '';
  socket.on('connect', () => socket.write('show servers state\n'));
  socket.on('data', (d) => { text += d; });
  socket.on('error', reject);
  socket.on('end', () => {
    const state = {};
    for (const line of text.split('\n').slice(2)) {
      const f = line.split(' ');
      if (f.length < 6) continue;
      (state[f[1]] = state[f[1]] || []).push({ name: f[3], addr: f[4], up: f[5] === '2' });
    }
    resolve(state);
  });
});

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const stubsFor = (address) => ({
  compute: new api.Compute(address, grpc.credentials.createInsecure(), CHANNEL),
  buffers: new api.Buffers(address, grpc.credentials.createInsecure(), CHANNEL),
  server: new api.Server(address, grpc.credentials.createInsecure(), CHANNEL),
});

const metadataFor = (key) => {
  const m = new grpc.Metadata();
  if (key !== undefined) m.set(AFFINITY, key);
  return m;
};

const DEADLINE_MS = 20000;
const deadline = () => new Date(Date.now() + DEADLINE_MS);

const unary = (stub, method, request, key) => new Promise((resolve, reject) => {
  stub[method](request, metadataFor(key), { deadline: deadline() },
               (error, reply) => (error ? reject(error) : resolve(reply)));
});

// A result stream's bytes (header, chunks at their offsets, trailer).
const result = (stub, method, request, key) => new Promise((resolve, reject) => {
  const call = stub[method](request, metadataFor(key), { deadline: deadline() });
  let bytes;
  let trailer;
  call.on('data', (m) => {
    if (m.header) bytes = Buffer.alloc(Number(m.header.total_bytes));
    if (m.data) m.data.data.copy(bytes, Number(m.data.offset));
    if (m.trailer) trailer = m.trailer;
  });
  call.on('error', reject);
  call.on('end', () => resolve({ bytes, trailer }));
});

const upload = (stub, bytes, shape, key, messageBytes = 4 << 20) => new Promise((resolve,
                                                                                 reject) => {
  const call = stub.Upload(metadataFor(key), { deadline: deadline() },
                           (error, reply) => (error ? reject(error) : resolve(reply)));
  call.write({ header: { name: 'haproxy-test', dtype: 'FLOAT64', shape } });
  for (let offset = 0; offset < bytes.length; offset += messageBytes) {
    call.write({ data: bytes.subarray(offset, offset + messageBytes) });
  }
  call.end();
});

const instanceOf = (bufferId) => bufferId.slice(0, 8);

// The ErrorInfo in a failed call's grpc-status-details-bin trailer, or undefined.
function errorInfo(error) {
  const [details] = error.metadata ? error.metadata.get('grpc-status-details-bin') : [];
  if (!details) return undefined;
  const any = RpcStatus.decode(details).details
    .find((d) => d.type_url.endsWith('/google.rpc.ErrorInfo'));
  return any && ErrorInfo.decode(any.value);
}

before(async () => {
  const binary = process.env.GPUCOMPUTE_SERVER;
  assert.ok(binary, 'set GPUCOMPUTE_SERVER to the gpucompute-server binary');
  replicas = await Promise.all(HOSTS.map(async (host) => {
    const { process: child, found } = await start(
      binary, [`--address=${host}:0`, '--metrics_address=', '--backend=cpu', '--grace_period=1s'],
      (log) => /serving gRPC on \S+ \(port (\d+)\)/.exec(log));
    const port = Number(found[1]);
    return { host, port, address: `${host}:${port}`, process: child };
  }));
  for (const r of replicas) {
    r.instance = (await unary(stubsFor(r.address).server, 'GetInfo', {})).instance_id;
  }
  // The replicas' SRV records (priority 0, weight 100), as a headless Service's.
  const dnsPort = await freePort('udp');
  const records = replicas.flatMap((r, i) => [
    `--srv-host=${SRV_NAME},r${i}.gpucompute.test,${r.port},0,100`,
    `--host-record=r${i}.gpucompute.test,${r.host}`]);
  await start('dnsmasq', ['--keep-in-foreground', `--port=${dnsPort}`, '--listen-address=127.0.0.1',
                          '--bind-interfaces', '--no-resolv', '--no-hosts', '--conf-file=/dev/null',
                          '--pid-file=', ...(process.getuid() === 0 ? ['--user=root'] : []),
                          ...records]);
  const proxyPort = await freePort('tcp');
  proxyAddress = `127.0.0.1:${proxyPort}`;
  statsSocket = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'gpucompute-haproxy-')), 'stats');
  const env = { ...process.env, GPUCOMPUTE_REPLICAS: SRV_NAME, GPUCOMPUTE_BIND: proxyAddress,
                GPUCOMPUTE_DNS: `127.0.0.1:${dnsPort}`, GPUCOMPUTE_STATS: statsSocket };
  const proxy = spawn('haproxy', ['-db', '-f', path.join(REPO, 'deploy', 'haproxy', 'haproxy.cfg')],
                      { env, stdio: ['ignore', 'ignore', 'pipe'] });
  children.push(proxy);
  let proxyLog = '';
  proxy.stderr.on('data', (d) => { proxyLog += d; });
  // Ready once both backends have the three replicas up.
  const until = Date.now() + 20000;
  for (;;) {
    const state = fs.existsSync(statsSocket) ? await serversState().catch(() => ({})) : {};
    const up = (b) => (state[b] || []).filter((s) => s.up && s.addr !== '-').length;
    if (up('by_affinity') === 3 && up('round_robin') === 3) break;
    assert.ok(Date.now() < until, `HAProxy did not find the three replicas:\n${proxyLog}`);
    await sleep(100);
  }
});

after(() => {
  for (const child of children) child.kill('SIGKILL');
});

test('calls without the key are spread round robin', async () => {
  const proxy = stubsFor(proxyAddress);
  const seen = {};
  for (let i = 0; i < 30; i++) {
    const id = (await unary(proxy.server, 'GetInfo', {})).instance_id;
    seen[id] = (seen[id] || 0) + 1;
  }
  assert.deepStrictEqual(Object.keys(seen).sort(), replicas.map((r) => r.instance).sort());
  assert.deepStrictEqual(Object.values(seen), [10, 10, 10]);
});

const rows = 4;
const cols = 64;

// One unit of work under one key: upload, normalize the buffer keeping the result on the
// device, download it, delete both: five calls. Returns where each buffer lived.
async function unit(proxy, key) {
  const values = Float64Array.from({ length: rows * cols }, () => Math.random() + 0.1);
  const input = await upload(proxy.buffers, Buffer.from(values.buffer), [rows, cols], key);
  const normalized = await result(proxy.compute, 'Normalize', {
    input: { buffer_id: input.id }, output: { keep_on_device: true },
  }, key);
  const stored = normalized.trailer.stored_buffer.id;
  const back = await result(proxy.buffers, 'Download', { buffer_id: stored }, key);
  const got = new Float64Array(back.bytes.buffer, back.bytes.byteOffset, rows * cols);
  for (let r = 0; r < rows; r++) {
    const row = values.subarray(r * cols, (r + 1) * cols);
    const sum = row.reduce((s, v) => s + v, 0);
    for (let c = 0; c < cols; c++) {
      assert.ok(Math.abs(got[r * cols + c] - row[c] / sum) <= 1e-14, `key ${key}: wrong value`);
    }
  }
  await unary(proxy.buffers, 'Delete', { buffer_id: input.id }, key);
  await unary(proxy.buffers, 'Delete', { buffer_id: stored }, key);
  return [instanceOf(input.id), instanceOf(stored)];
}

// Runs `units` units over `concurrency` lanes, the keys in turn.
async function run(proxy, units, concurrency, work) {
  let next = 0;
  const lane = async () => {
    while (next < units) {
      const i = next++;
      await work(KEYS[i % KEYS.length], i);
    }
  };
  await Promise.all(Array.from({ length: concurrency }, lane));
}

test('1,000 calls over 12 keys: every call of a key on one replica, 0 misrouted', async () => {
  const proxy = stubsFor(proxyAddress);
  const owner = {};
  let misrouted = 0;
  let calls = 0;
  await run(proxy, 200, 16, async (key) => {
    for (const instance of await unit(proxy, key)) {
      owner[key] = owner[key] || instance;
      if (owner[key] !== instance) misrouted++;
    }
    calls += 5;
  });
  assert.strictEqual(calls, 1000);
  assert.strictEqual(misrouted, 0);
  const used = new Set(Object.values(owner));
  assert.ok(used.size >= 2, `the 12 keys all hashed to ${[...used]}`);
  console.log(`1000 calls over ${KEYS.length} keys on ${used.size} replicas, 0 misrouted`);
});

test('large transfers through the proxy are byte-exact; throughput against direct', async () => {
  const bytes = crypto.randomBytes(64 << 20);
  const target = replicas[0];
  const key = 'large-transfer';
  const rates = {};
  for (const [name, address, k] of [['direct', target.address, undefined],
                                    ['haproxy', proxyAddress, key]]) {
    const stubs = stubsFor(address);
    let best = { up: Infinity, down: Infinity };
    for (let rep = 0; rep < 3; rep++) {
      let t = process.hrtime.bigint();
      const info = await upload(stubs.buffers, bytes, [bytes.length / 8], k);
      const up = Number(process.hrtime.bigint() - t) / 1e9;
      t = process.hrtime.bigint();
      const back = await result(stubs.buffers, 'Download',
                                { buffer_id: info.id, chunk_bytes: 4 << 20 }, k);
      const down = Number(process.hrtime.bigint() - t) / 1e9;
      assert.ok(back.bytes.equals(bytes), `${name}: the downloaded bytes differ`);
      await unary(stubs.buffers, 'Delete', { buffer_id: info.id }, k);
      best = { up: Math.min(best.up, up), down: Math.min(best.down, down) };
    }
    rates[name] = { up: bytes.length / best.up / 1e6, down: bytes.length / best.down / 1e6 };
  }
  const row = (n) => `${n.padEnd(8)} upload ${rates[n].up.toFixed(0).padStart(5)} MB/s`
    + `   download ${rates[n].down.toFixed(0).padStart(5)} MB/s`;
  console.log('64 MiB buffer, @grpc/grpc-js, best of 3, CPU replica on loopback');
  console.log(row('direct'));
  console.log(row('haproxy'));
  console.log(`haproxy/direct: upload ${(rates.haproxy.up / rates.direct.up).toFixed(2)}, `
              + `download ${(rates.haproxy.down / rates.direct.down).toFixed(2)}`);
});

test('a replica killed mid-run fails only the calls of its keys, each naming what was lost',
     async () => {
  const proxy = stubsFor(proxyAddress);
  // Where each key lives now.
  const home = {};
  for (const key of KEYS) home[key] = (await unit(proxy, key))[0];
  const victim = replicas.find((r) => r.instance === home[KEYS[0]]);
  const lostKeys = KEYS.filter((k) => home[k] === victim.instance);
  // Waves of 24 units (each key twice): all upload, then all compute and download. The
  // victim is killed between the uploads and the computes of the third wave.
  const failures = [];
  const movedTo = {};
  for (let wave = 0; wave < 6; wave++) {
    const units = [...KEYS, ...KEYS].map((key) => ({ key }));
    await Promise.all(units.map(async (u) => {
      const values = Float64Array.from({ length: rows * cols }, () => Math.random() + 0.1);
      u.input = (await upload(proxy.buffers, Buffer.from(values.buffer), [rows, cols], u.key)).id;
    }));
    if (wave === 2) {
      victim.process.kill('SIGKILL');
      await new Promise((r) => victim.process.once('exit', r));
    }
    await Promise.all(units.map(async (u) => {
      try {
        const out = await result(proxy.compute, 'Normalize', { input: { buffer_id: u.input } },
                                 u.key);
        assert.strictEqual(out.bytes.length, rows * cols * 8);
        await unary(proxy.buffers, 'Delete', { buffer_id: u.input }, u.key);
      } catch (error) {
        if (error instanceof assert.AssertionError) throw error;
        failures.push({ wave, key: u.key, input: u.input, error });
      }
      if (wave > 2) {
        // After the loss a lost key lives on one surviving replica, consistently.
        const at = instanceOf(u.input);
        assert.notStrictEqual(at, victim.instance);
        movedTo[u.key] = movedTo[u.key] || at;
        assert.strictEqual(movedTo[u.key], at, `key ${u.key} moved twice`);
      }
    }));
  }
  assert.ok(lostKeys.length > 0);
  assert.strictEqual(failures.length, 2 * lostKeys.length,
                     failures.map((f) => `${f.wave} ${f.key}: ${f.error.message}`).join('\n'));
  for (const f of failures) {
    assert.strictEqual(f.wave, 2);
    assert.ok(lostKeys.includes(f.key), `key ${f.key} did not live on the killed replica`);
    assert.strictEqual(f.error.code, grpc.status.FAILED_PRECONDITION, f.error.message);
    const info = errorInfo(f.error);
    assert.ok(info, `no ErrorInfo: ${f.error.message}`);
    assert.strictEqual(info.domain, 'gpucompute.dev');
    assert.strictEqual(info.reason, 'BUFFER_ON_OTHER_REPLICA', f.error.message);
    assert.strictEqual(info.metadata.field, 'input.buffer_id');
    assert.strictEqual(info.metadata.owner_instance, victim.instance);
    assert.strictEqual(info.metadata.owner_instance, instanceOf(f.input));
    assert.notStrictEqual(info.metadata.instance, victim.instance);
  }
  console.log(`killed replica ${victim.instance} with ${lostKeys.length} of ${KEYS.length} keys: `
              + `${failures.length} calls failed, all BUFFER_ON_OTHER_REPLICA owned by it; 0 others`);
});
