// The SDK's own logic under the host's Node.js (`node --test guest-sdk/js/tests`): what bursts,
// graphs, streams, rings and persistent launches hand the host, against fake sessions that record their calls, and what they
// refuse before calling it. These modules import no generated binding, so they load outside a
// component; the examples run the rest on the emulator (tests/tests/suite/guest_languages.rs).

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { DeviceBuffer } from '../tasklet-gpu/buffer.js';
import { Actor, PersistentLaunch, Ring, newRing } from '../tasklet-gpu/actor.js';
import { Burst, MAX_BURST_LAUNCHES } from '../tasklet-gpu/burst.js';
import {
  GpuError, InvalidArgument, InvalidInput, OutOfBounds, Unauthorized, host,
} from '../tasklet-gpu/errors.js';
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

function ringSession() {
  return { raw: fakeRaw({ newRing: () => fakeRaw({ capacity: 4, send: 1, recv: new Uint8Array(0) }), launchPersistent: () => fakeRaw() }) };
}

const rawStatus = (fields = {}) => ({
  isActive: true, shouldTerminate: false, hasTerminated: false, errorsEncountered: 0,
  messagesProcessed: 0n, failure: undefined, ...fields,
});

test('rings carry whole messages of an element type', () => {
  const session = ringSession();
  const inbox = newRing(session, 'to-device', 'f32', 2, 4);
  const outbox = newRing(session, 'from-device', 'u16', 2, 8);
  assert.deepEqual(session.raw.calls, [['newRing', ['to-device', 8, 4]], ['newRing', ['from-device', 4, 8]]]);
  newRing(session, 'from-device', 'f32', 1, 2, true);
  assert.deepEqual(session.raw.calls.at(-1), ['newSequencedRing', ['from-device', 4, 2]]);
  assert.ok(inbox instanceof Ring);
  assert.deepEqual([inbox.messageSize, inbox.capacity], [8, 4]);
  assert.equal(inbox.send([1, 2, 3, 4]), 1);
  assert.equal(inbox.send(new Float32Array(0)), 0);
  assert.deepEqual(inbox.raw.calls.at(-1), ['send', [new Uint8Array(new Float32Array([1, 2, 3, 4]).buffer)]]);
  const answers = fakeRaw({ recv: new Uint8Array([1, 0, 2, 0, 3, 0, 4, 0]) });
  outbox.raw = answers;
  assert.deepEqual(outbox.recv(5, 250), [new Uint16Array([1, 2]), new Uint16Array([3, 4])]);
  assert.ok(outbox.tryRecv(1)[0] instanceof Uint16Array);
  assert.deepEqual(answers.calls, [['recv', [5, 250000n]], ['recv', [1, 0n]]]);
});

test('a ring\'s mistakes are refused before the host is called', () => {
  const session = ringSession();
  for (const bad of [
    () => newRing(session, 'to-device', 'u8', 3, 4), () => newRing(session, 'to-device', 'f32', 0, 4),
    () => newRing(session, 'from-device', 'f32', 1.5, 4), () => newRing(session, 'to-device', 'u33', 1, 4),
    () => newRing(session, 'to-device', 'f32', 1, -1), () => newRing(session, 'to-device', 'f32', 1, 2 ** 32),
  ]) {
    assert.throws(bad, InvalidInput);
  }
  assert.deepEqual(session.raw.calls, []);
  const ring = newRing(session, 'to-device', 'f32', 2, 4);
  assert.throws(() => ring.send([1, 2, 3]), (e) =>
    e instanceof InvalidInput && e.message === '12 bytes are not whole messages of 2 f32 (8 bytes)');
  for (const bad of [() => ring.recv(1, -1), () => ring.recv(1, '1'), () => ring.recv(-1), () => ring.recv(2 ** 32)]) {
    assert.throws(bad, InvalidInput);
  }
  assert.deepEqual(ring.raw.calls, []);
  const refusal = Object.assign(new Error('refused'), {
    payload: { tag: 'unauthorized', val: 'the tasklet lacks the `persistent` right' },
  });
  session.raw = fakeRaw({ newRing: refusal });
  assert.throws(() => newRing(session, 'to-device', 'f32', 64, 256), Unauthorized);
});

test('a persistent launch hands rings, the control block and args in order', () => {
  const session = ringSession();
  const kernel = fakeKernel(session, 'actor_scale');
  const [inbox, outbox] = [newRing(session, 'to-device', 'f32', 64, 256), newRing(session, 'from-device', 'f32', 64, 256)];
  const x = new DeviceBuffer(session, 'x', 'f32', 4);
  const actor = new PersistentLaunch(session, kernel, LaunchConfig.linear(1, 64))
    .ring(inbox).ring(outbox).control().arg(f32(2)).args(x).start();
  const [name, [rawKernel, config, args]] = session.raw.calls.at(-1);
  assert.deepEqual([name, rawKernel, config.grid, config.block], ['launchPersistent', 'kernel actor_scale', [1, 1, 1], [64, 1, 1]]);
  assert.deepEqual(args, [
    { tag: 'ring', val: inbox.raw }, { tag: 'ring', val: outbox.raw }, { tag: 'control' },
    { tag: 'arg', val: { tag: 'f32', val: 2 } }, { tag: 'arg', val: bufferArg(x) },
  ]);
  assert.ok(actor instanceof Actor);
  actor.raw = fakeRaw({
    status: rawStatus({ messagesProcessed: 2n ** 40n }),
    stop: rawStatus({ isActive: false, shouldTerminate: true, hasTerminated: true }),
  });
  assert.equal(actor.status().messagesProcessed, 2n ** 40n);
  assert.deepEqual(actor.stop(), {
    isActive: false, shouldTerminate: true, hasTerminated: true, errorsEncountered: 0,
    messagesProcessed: 0n, failure: undefined,
  });
  actor.stop(3600000);
  actor.stop(Infinity);
  assert.deepEqual(actor.raw.calls, [['status', []], ['stop', [500]], ['stop', [3600000]], ['stop', [2 ** 32 - 1]]]);
});

test('another session\'s rings, kernels and buffers are refused before the host is called', () => {
  const [session, other] = [ringSession(), ringSession()];
  const theirs = newRing(other, 'to-device', 'f32', 1, 4);
  const kernel = fakeKernel(session, 'serve');
  assert.throws(() => new PersistentLaunch(session, kernel).control().ring(theirs), (e) =>
    e instanceof InvalidArgument && e.message === 'persistent launch of "serve": argument 1 is a ring of another session');
  assert.throws(() => new PersistentLaunch(session, kernel).arg(new DeviceBuffer(other, 'y', 'u32', 1)), (e) =>
    e instanceof InvalidArgument && e.message === 'persistent launch of "serve": argument 0 is a buffer of another session');
  assert.throws(() => new PersistentLaunch(session, fakeKernel(other)), InvalidArgument);
  assert.throws(() => new PersistentLaunch(session, kernel).ring(new DeviceBuffer(session, 'z', 'u32', 1)), InvalidInput);
  assert.throws(() => new PersistentLaunch(session, kernel).control().start(), (e) =>
    e instanceof InvalidInput && e.message.includes('has no LaunchConfig'));
  const actor = new PersistentLaunch(session, kernel, new LaunchConfig()).start();
  assert.throws(() => actor.stop(-1), InvalidInput);
  assert.deepEqual(session.raw.calls.map((c) => c[0]), ['launchPersistent']);
  assert.deepEqual(actor.raw.calls, []);
});
