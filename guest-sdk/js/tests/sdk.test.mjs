// The SDK's own logic under the host's Node.js (`node --test guest-sdk/js/tests`): what bursts,
// graphs and streams hand the host, against fake sessions that record their calls, and what they
// refuse before calling it. These modules import no generated binding, so they load outside a
// component; the examples run the rest on the emulator (tests/tests/suite/guest_languages.rs).

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { DeviceBuffer } from '../tasklet-gpu/buffer.js';
import { Burst, MAX_BURST_LAUNCHES } from '../tasklet-gpu/burst.js';
import { GpuError, InvalidArgument, InvalidInput, OutOfBounds, host } from '../tasklet-gpu/errors.js';
import { DeviceScalar, Graph, Node } from '../tasklet-gpu/graph.js';
import { Launch, LaunchConfig, f32, u32 } from '../tasklet-gpu/launch.js';
import { Event, Stream } from '../tasklet-gpu/stream.js';

/** A generated resource's stand-in: each method call is recorded as [name, args] and answers
 * what `answers` says (a value, a function of the args, or an error to throw). */
function fakeRaw(answers = {}) {
  const calls = [];
  return new Proxy({ calls }, {
    get(target, name) {
      if (name === 'calls') return calls;
      return (...args) => {
        calls.push([name, args]);
        const answer = answers[name];
        if (answer instanceof Error || (answer && answer.payload)) throw answer;
        return typeof answer === 'function' ? answer(...args) : answer;
      };
    },
  });
}

function fakeSession() {
  return { raw: fakeRaw({ launchBurst: 7n }) };
}

function fakeKernel(session, name = 'k') {
  return { module: { session }, raw: `kernel ${name}`, name };
}

const bufferArg = (buf, offset = 0n) => ({ tag: 'buffer', val: { buffer: buf.raw, offset } });

test('a burst is one host call with the shared args and each launch\'s changes', () => {
  const session = fakeSession();
  const kernel = fakeKernel(session, 'axpy_row');
  const m = new DeviceBuffer(session, 'm', 'f32', 64);
  const burst = new Burst(session, kernel).config(LaunchConfig.forNumElems(16)).args(m, f32(1), u32(16));
  for (let row = 0; row < 3; row++) burst.launch({ 0: m.at(row * 16), 1: f32(row) });
  burst.launch([[2, u32(8)]]).launch(new Map([[1, f32(0.5)]])).repeat(2);
  assert.equal(burst.length, 7);
  assert.equal(burst.run(), 7n);
  const [[name, [rawKernel, config, args, launches]]] = session.raw.calls;
  assert.deepEqual([name, rawKernel, config.grid], ['launchBurst', 'kernel axpy_row', [1, 1, 1]]);
  assert.deepEqual(args, [bufferArg(m), { tag: 'f32', val: 1 }, { tag: 'u32', val: 16 }]);
  assert.deepEqual(launches[1], [{ index: 0, arg: bufferArg(m, 64n) }, { index: 1, arg: { tag: 'f32', val: 1 } }]);
  assert.deepEqual(launches.slice(3), [
    [{ index: 2, arg: { tag: 'u32', val: 8 } }], [{ index: 1, arg: { tag: 'f32', val: 0.5 } }], [], [],
  ]);
  assert.equal(MAX_BURST_LAUNCHES, 4096);
});

test('a burst\'s mistakes are refused before the host is called', () => {
  const [session, other] = [fakeSession(), fakeSession()];
  const kernel = fakeKernel(session);
  assert.throws(() => new Burst(session, fakeKernel(other)), InvalidArgument);
  const foreign = new DeviceBuffer(other, 'x', 'u32', 4);
  assert.throws(() => new Burst(session, kernel).launch({}).launch({ 0: foreign }), (e) =>
    e instanceof InvalidArgument && e.message === 'burst of "k": launch 1\'s argument 0 is a buffer of another session');
  assert.throws(() => new Burst(session, kernel).launch({ 0: 3 }), InvalidInput);
  assert.throws(() => new Burst(session, kernel).launch([[-1, u32(3)]]), InvalidInput);
  assert.throws(() => new Burst(session, kernel).repeat(1).run(), (e) =>
    e instanceof InvalidInput && e.message.includes('has no LaunchConfig'));
  assert.deepEqual(session.raw.calls, []);
});

test('a refused launch fails the whole burst as its error class', () => {
  const session = fakeSession();
  const refusal = Object.assign(new Error('refused'), {
    payload: { tag: 'invalid-argument', val: 'launch 3 of the burst: ...' },
  });
  session.raw = fakeRaw({ launchBurst: refusal });
  const burst = new Burst(session, fakeKernel(session)).config(new LaunchConfig()).repeat(4);
  assert.throws(() => burst.run(), (e) => e instanceof InvalidArgument && e instanceof GpuError
    && String(e) === 'invalid-argument: launch 3 of the burst: ...');
});

test('a graph\'s launches take device scalars among their arguments', () => {
  const session = fakeSession();
  const graph = new Graph(session, fakeRaw({ launch: 0, scalar: 3 }));
  const [a, b] = [new DeviceBuffer(session, 'a', 'f32', 8), new DeviceBuffer(session, 'b', 'f32', 8)];
  const step = graph.scalar(5);
  assert.ok(step instanceof DeviceScalar);
  const node = graph.launch(fakeKernel(session), new LaunchConfig(), a, b, u32(8), step);
  assert.deepEqual(node, new Node(0));
  graph.setScalar(step, 2n ** 64n - 1n);
  graph.setArgs(node, b, a, u32(8), step);
  graph.replay();
  graph.replay(3);
  const calls = graph.raw.calls;
  assert.deepEqual(calls[0], ['scalar', [5n]]);
  const wanted = (x, y) => [
    { tag: 'arg', val: bufferArg(x) }, { tag: 'arg', val: bufferArg(y) },
    { tag: 'arg', val: { tag: 'u32', val: 8 } }, { tag: 'scalar', val: 3 },
  ];
  assert.deepEqual(calls[1][1][2], wanted(a, b));
  assert.deepEqual(calls[2], ['setScalar', [3, 2n ** 64n - 1n]]);
  assert.deepEqual(calls[3], ['setArgs', [0, wanted(b, a)]]);
  assert.deepEqual(calls.slice(4), [['replay', [1]], ['replay', [3]]]);
});

test('a graph\'s copies and fills cover whole buffers, and its values are checked', () => {
  const session = fakeSession();
  const graph = new Graph(session, fakeRaw({ copy: 1, fill: 2 }));
  const [a, b] = [new DeviceBuffer(session, 'a', 'u32', 8), new DeviceBuffer(session, 'b', 'u32', 4)];
  assert.deepEqual(graph.copy(a, b), new Node(1));
  assert.deepEqual(graph.fill(b, 0xffffffff), new Node(2));
  assert.deepEqual(graph.raw.calls, [['copy', ['a', 0n, 'b', 0n, 16n]], ['fill', ['b', 0n, 16n, 0xffffffff]]]);
  assert.throws(() => graph.copy(b, a), OutOfBounds);
  assert.throws(() => graph.copy(a, new DeviceBuffer(session, 'c', 'f32', 4)), InvalidInput);
  assert.throws(() => graph.fill(b, 2 ** 32), InvalidInput);
  for (const bad of [-1, 2n ** 64n, 1.5]) assert.throws(() => graph.scalar(bad), InvalidInput);
  assert.throws(() => graph.replay(0.5), InvalidInput);
  const other = new Graph(session, fakeRaw({ scalar: 0 }));
  const theirs = other.scalar();
  assert.throws(() => graph.setScalar(theirs, 1), InvalidArgument);
  assert.throws(() => graph.launch(fakeKernel(session), new LaunchConfig(), theirs), (e) =>
    e instanceof InvalidArgument && e.message === 'argument 0 is a device scalar of another graph');
  assert.throws(() => graph.launch(fakeKernel(fakeSession()), new LaunchConfig()), InvalidArgument);
  assert.equal(graph.raw.calls.length, 2);
});

test('a stream\'s work goes to its queue in bytes, and launches go on it', () => {
  const session = fakeSession();
  const stream = new Stream(session, fakeRaw({ memRead: new Uint8Array([2, 0, 0, 0]), launch: 9n }));
  const event = new Event(session, fakeRaw({ elapsedSince: 1500n, query: true }));
  const x = new DeviceBuffer(session, 'x', 'u32', 4);
  stream.write(x, [1, 2], 1);
  stream.copy(x, x, 2, 0, 1);
  assert.deepEqual(Array.from(stream.read(x, 1, 2)), [2]);
  assert.deepEqual(Array.from(stream.read(x, 2, 2)), []);
  stream.record(event);
  stream.wait(event);
  assert.equal(new Launch(session, fakeKernel(session)).on(stream).config(new LaunchConfig()).arg(x).run(), 9n);
  assert.deepEqual(stream.raw.calls.map(([name]) => name), ['memWrite', 'memCopy', 'memRead', 'record', 'wait', 'launch']);
  assert.deepEqual(stream.raw.calls[0][1], ['x', 4n, new Uint8Array([1, 0, 0, 0, 2, 0, 0, 0])]);
  assert.deepEqual(stream.raw.calls[1][1], ['x', 8n, 'x', 0n, 4n]);
  assert.deepEqual(stream.raw.calls[2][1], ['x', 4n, 4n]);
  assert.equal(event.elapsedNsSince(new Event(session, fakeRaw())), 1500n);
  assert.equal(event.query(), true);
  assert.deepEqual(session.raw.calls, []);
});

test('a stream refuses foreign events, buffers and streams, and spans outside a buffer', () => {
  const [session, other] = [fakeSession(), fakeSession()];
  const stream = new Stream(session, fakeRaw());
  assert.throws(() => stream.record(new Event(other, fakeRaw())), InvalidArgument);
  assert.throws(() => new Event(session, fakeRaw()).elapsedNsSince(new Event(other, fakeRaw())), InvalidArgument);
  assert.throws(() => stream.read(new DeviceBuffer(other, 'y', 'u32', 1)), InvalidArgument);
  assert.throws(() => new Launch(session, fakeKernel(session)).on(new Stream(other, fakeRaw())), InvalidArgument);
  assert.throws(() => stream.write(new DeviceBuffer(session, 'z', 'u32', 1), [1, 2]), InvalidInput);
  assert.deepEqual(stream.raw.calls, []);
  // The host's errors arrive as their classes here too.
  assert.throws(() => host(() => { throw { payload: { tag: 'unsupported', val: 'no streams' } }; }), (e) =>
    e.kind === 'unsupported' && e.message === 'no streams');
});
