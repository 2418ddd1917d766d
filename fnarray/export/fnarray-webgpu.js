// fnarray-webgpu.js: runs a function exported by fnarray.export.webgpu in a web page through WebGPU.
//
// An ES module with no dependencies and no build step:
//
//   import { loadModel } from "./model/fnarray-webgpu.js";
//   const model = await loadModel("./model/");          // the folder, or the URL of its model.json
//   const [probs] = await model.run({ x: new Float32Array(64) });
//
// Inputs are keyed by the Python parameter names of the exported function (pytree leaves by dotted
// paths, e.g. "params.w1"); each is a typed array of exactly the exported shape, flattened row-major:
// Float32Array for float32, Int32Array for int32, Uint32Array for uint32, Uint8Array (0 or 1) for
// bool, Uint16Array (IEEE half bits) for float16 and Float32Array of (re, im) pairs (twice the element
// count) for complex64. `run` resolves to the outputs as typed arrays,
// in the order of the function's flattened outputs. A bad input rejects the promise with a message
// that names the input, the expected shape and the length given.
//
// The manifest (model.json) lists buffers, WGSL kernels and the dispatches in order; loading creates
// every buffer, pipeline and bind group once, and a run is: write the inputs, one compute pass with
// the dispatches, copy the outputs to staging buffers, map them. Runs of one model are serialised.
//
// A bundle of several entry points (fnarray.export.webgpu({"prefill": ..., "decode": ...})) shares its
// weights and state among them: `model.entries.decode.run({...})`. State (state_argnums: a KV cache)
// stays in GPU buffers between runs. A run reads it and keeps its new value: the dispatches write it in
// place when it is an update of a slice of the state (a KV cache's new positions, the entry's
// `state_in_place`: only those positions are written), else compute it into the state's partner buffer
// (the two then swap roles) or the run copies it back at the end; it returns only the other outputs.
// `model.resetState()`, `model.readState(name)` and `model.writeState(name, value)` reach it from the page.

export const FORMAT = "fnarray-webgpu";
export const MANIFEST_VERSION = 2;

export const ENABLE_WEBGPU_HELP =
  "WebGPU is not available: this browser does not expose navigator.gpu. " +
  "Use a browser with WebGPU enabled: Chrome or Edge 113 or later on Windows, macOS and ChromeOS " +
  "(on Linux, turn on chrome://flags/#enable-unsafe-webgpu and chrome://flags/#enable-vulkan if WebGPU " +
  "is not on by default), Safari 26 or later, or Firefox 141 or later on Windows (elsewhere set " +
  "dom.webgpu.enabled to true in about:config). WebGPU also needs a secure context: open the page " +
  "over https:// or from http://127.0.0.1 or http://localhost (python -m fnarray.export.serve DIR), " +
  "not as a file:// URL.";

/** Thrown (as a rejection) when the browser has no WebGPU or gives no adapter. */
export class WebGPUUnavailableError extends Error {
  constructor(message) {
    super(message);
    this.name = "WebGPUUnavailableError";
  }
}

const ARRAY_TYPES = {
  float32: Float32Array,
  int32: Int32Array,
  uint32: Uint32Array,
  bool: Uint8Array,
  float16: Uint16Array,
  complex64: Float32Array,
};
const ITEM_BYTES = { float32: 4, int32: 4, uint32: 4, bool: 4, float16: 2, complex64: 8 };
// Typed-array entries per element: complex64 is an interleaved (re, im) pair of float32.
const PARTS = { complex64: 2 };

// WebGPU's default limits: only what a bundle needs beyond them is requested from the adapter.
const DEFAULT_LIMITS = {
  maxStorageBuffersPerShaderStage: 8,
  maxComputeWorkgroupSizeX: 256,
  maxComputeWorkgroupSizeY: 256,
  maxComputeWorkgroupSizeZ: 64,
  maxComputeInvocationsPerWorkgroup: 256,
  maxComputeWorkgroupsPerDimension: 65535,
  maxComputeWorkgroupStorageSize: 16384,
  maxStorageBufferBindingSize: 134217728,
  maxBufferSize: 268435456,
};

/** Whether this page can use WebGPU at all (navigator.gpu exists). */
export function webgpuAvailable() {
  return typeof navigator !== "undefined" && !!navigator.gpu;
}

function elementCount(shape) {
  return shape.reduce((a, b) => a * b, 1);
}

function shapeText(dtype, shape) {
  return `${dtype}[${shape.join(", ")}]`;
}

function describe(value) {
  if (value === undefined) return "undefined";
  if (value === null) return "null";
  if (ArrayBuffer.isView(value)) return `a ${value.constructor.name} of length ${value.length}`;
  if (Array.isArray(value)) return `an Array of length ${value.length}`;
  if (typeof value === "object") return `a ${value.constructor ? value.constructor.name : "object"}`;
  return `a ${typeof value} (${String(value)})`;
}

function baseUrl() {
  if (typeof document !== "undefined" && document.baseURI) return document.baseURI;
  if (typeof location !== "undefined") return location.href;
  return undefined;
}

function manifestUrl(url) {
  const u = new URL(String(url), baseUrl());
  if (u.pathname.endsWith(".json")) return u;
  if (!u.pathname.endsWith("/")) u.pathname += "/";
  return new URL("model.json", u);
}

async function fetchOk(url) {
  let res;
  try {
    res = await fetch(url);
  } catch (e) {
    throw new Error(`could not load ${url}: ${e.message}`);
  }
  if (!res.ok) throw new Error(`could not load ${url}: HTTP ${res.status} ${res.statusText}`);
  return res;
}

function checkManifest(m, url) {
  if (!m || typeof m !== "object" || m.format !== FORMAT) {
    throw new Error(`${url} is not an fnarray WebGPU manifest (format ${JSON.stringify(m && m.format)}, ` +
      `expected "${FORMAT}")`);
  }
  if (m.version !== MANIFEST_VERSION) {
    throw new Error(`${url} has manifest version ${JSON.stringify(m.version)}, but this fnarray-webgpu.js reads ` +
      `version ${MANIFEST_VERSION}: use the fnarray-webgpu.js that the same export wrote next to it, ` +
      `or export the model again with this fnarray`);
  }
}

function requirements(manifest, adapter) {
  const requiredLimits = {};
  for (const [name, value] of Object.entries(manifest.limits || {})) {
    const have = adapter.limits[name];
    if (have === undefined) continue;
    if (value > have) {
      throw new Error(`this model needs the WebGPU limit ${name} = ${value}, but this browser's adapter ` +
        `gives ${have}; export it with smaller arrays, or use a device with a larger limit`);
    }
    if (name in DEFAULT_LIMITS && value > DEFAULT_LIMITS[name]) requiredLimits[name] = value;
  }
  const requiredFeatures = [];
  for (const f of manifest.features || []) {
    if (!adapter.features.has(f)) {
      throw new Error(`this model needs the WebGPU feature "${f}"` +
        (f === "shader-f16" ? " (it computes in float16)" : "") +
        `, which this browser's adapter lacks; export it with float32 arrays instead`);
    }
    requiredFeatures.push(f);
  }
  return { requiredLimits, requiredFeatures };
}

/**
 * Load an exported model.
 *
 * @param {string|URL} url the bundle's folder (or its model.json), relative to the page.
 * @param {{adapter?: GPUAdapter, device?: GPUDevice, powerPreference?: string}} [options]
 * @returns {Promise<Model>} rejects with WebGPUUnavailableError without WebGPU, and with an Error
 *   naming the file for a missing file, a manifest of another version or a kernel the browser rejects.
 */
export async function loadModel(url, options = {}) {
  if (!webgpuAvailable()) throw new WebGPUUnavailableError(ENABLE_WEBGPU_HELP);
  const murl = manifestUrl(url);
  const manifest = await (await fetchOk(murl)).json();
  checkManifest(manifest, murl);
  let device = options.device;
  if (!device) {
    const adapter = options.adapter ||
      await navigator.gpu.requestAdapter(options.powerPreference ? { powerPreference: options.powerPreference } : {});
    if (!adapter) {
      throw new WebGPUUnavailableError("navigator.gpu exists but gave no GPU adapter (the GPU may be " +
        "blocklisted or its driver missing). " + ENABLE_WEBGPU_HELP);
    }
    device = await adapter.requestDevice(requirements(manifest, adapter));
  }
  const [sources, weights] = await Promise.all([
    Promise.all(manifest.kernels.map(async (k) => (await fetchOk(new URL(k.file, murl))).text())),
    manifest.weights.bytes > 0
      ? fetchOk(new URL(manifest.weights.file, murl)).then((r) => r.arrayBuffer())
      : Promise.resolve(new ArrayBuffer(0)),
  ]);
  if (weights.byteLength !== manifest.weights.bytes) {
    throw new Error(`${new URL(manifest.weights.file, murl)} has ${weights.byteLength} bytes, the manifest ` +
      `says ${manifest.weights.bytes}: the bundle's files are from different exports`);
  }
  const model = new Model(manifest, device, !options.device);
  await model._build(sources, weights, murl);
  return model;
}

function entriesOf(m) {
  if (m.entries) return m.entries;
  return [{ name: m.name, inputs: m.inputs, outputs: m.outputs, dispatches: m.dispatches,
    state_updates: m.state_updates || [] }];
}

function checkValue(spec, value, what) {
  const n = elementCount(spec.shape) * (PARTS[spec.dtype] || 1);
  const Type = ARRAY_TYPES[spec.dtype];
  const want = `${shapeText(spec.dtype, spec.shape)} (${n} element${n === 1 ? "" : "s"}) as a ${Type.name}`;
  if (value === undefined) throw new TypeError(`missing ${what} "${spec.name}": expected ${want}`);
  if (!(value instanceof Type)) throw new TypeError(`${what} "${spec.name}": expected ${want}, got ${describe(value)}`);
  if (value.length !== n) throw new RangeError(`${what} "${spec.name}": expected ${want}, got ${describe(value)}`);
}

function toBytes(spec, value, size) {
  let bytes;
  if (spec.dtype === "bool") {
    bytes = new Uint8Array(Uint32Array.from(value, (v) => (v ? 1 : 0)).buffer);
  } else {
    bytes = new Uint8Array(value.buffer, value.byteOffset, value.byteLength);
  }
  if (bytes.byteLength !== size) {
    const padded = new Uint8Array(size);
    padded.set(bytes);
    bytes = padded;
  }
  return bytes;
}

function fromMapped(spec, raw) {
  const n = elementCount(spec.shape) * (PARTS[spec.dtype] || 1);
  if (spec.dtype === "bool") return Uint8Array.from(new Uint32Array(raw, 0, n), (v) => (v ? 1 : 0));
  return new ARRAY_TYPES[spec.dtype](raw.slice(0, elementCount(spec.shape) * ITEM_BYTES[spec.dtype]));
}

/** One entry point of a bundle: `run(inputs)`, `inputs`, `outputs`, `name`. */
export class Entry {
  constructor(model, spec) {
    this.model = model;
    this.name = spec.name;
    this._spec = spec;
  }

  /** The run-time inputs: [{name, dtype, shape}], in the order of the function's arguments (state left out). */
  get inputs() {
    return this._spec.inputs.map(({ name, dtype, shape }) => ({ name, dtype, shape: shape.slice() }));
  }

  /** The outputs: [{name, dtype, shape}], in the order `run` returns them (state left out). */
  get outputs() {
    return this._spec.outputs.map(({ name, dtype, shape }) => ({ name, dtype, shape: shape.slice() }));
  }

  /**
   * Run the entry on `inputs` ({name: typed array}); the state is read and updated on the GPU.
   * @returns {Promise<Array<TypedArray>>} the outputs that are not state, in the function's order.
   */
  run(inputs) {
    return this.model._enqueue(() => this.model._run(this, inputs));
  }
}

/**
 * A loaded model: `run(inputs)`, `inputs`, `outputs` (a bundle of one function), `entries` (every entry point
 * by name), `state`, `resetState()`, `readState(name)`, `writeState(name, value)`, `manifest`, `device`,
 * `destroy()`.
 */
export class Model {
  constructor(manifest, device, ownsDevice) {
    this.manifest = manifest;
    this.device = device;
    this._ownsDevice = ownsDevice;
    this._lost = null;
    this._last = Promise.resolve();
    this._entryList = entriesOf(manifest).map((spec) => new Entry(this, spec));
    /** The entry points by name: `model.entries.decode.run({...})`. */
    this.entries = Object.fromEntries(this._entryList.map((e) => [e.name, e]));
    this._stateSpecs = manifest.state || [];
    // A state leaf with a partner buffer: runs that compute its new value write it into the partner, and the
    // two swap roles (no copy). `_flipped` holds the state buffers whose value is in the partner now.
    this._flipped = new Set();
    this._remap = new Map();
    this._flipKey = "";
    device.lost.then((info) => { this._lost = info; });
  }

  _only(what) {
    if (this._entryList.length === 1) return this._entryList[0];
    const names = this._entryList.map((e) => `"${e.name}"`).join(", ");
    throw new TypeError(`model.${what}: this bundle has several entry points (${names}); use ` +
      `model.entries.<name>.${what}`);
  }

  /** The run-time inputs of a bundle of one function: [{name, dtype, shape}]. */
  get inputs() {
    return this._only("inputs").inputs;
  }

  /** The outputs of a bundle of one function: [{name, dtype, shape}], in the order `run` returns them. */
  get outputs() {
    return this._only("outputs").outputs;
  }

  /** The state kept on the GPU between runs: [{name, dtype, shape}]. */
  get state() {
    return this._stateSpecs.map(({ name, dtype, shape }) => ({ name, dtype, shape: shape.slice() }));
  }

  async _build(sources, weights, murl) {
    const m = this.manifest;
    const d = this.device;
    d.pushErrorScope("validation");
    const modules = m.kernels.map((k, i) => d.createShaderModule({ code: sources[i], label: k.name }));
    const infos = await Promise.all(modules.map((mod) => mod.getCompilationInfo()));
    infos.forEach((info, i) => {
      const errors = info.messages.filter((msg) => msg.type === "error");
      if (errors.length) {
        const text = errors.map((e) => `line ${e.lineNum}:${e.linePos}: ${e.message}`).join("; ");
        throw new Error(`this browser's WGSL compiler rejected ${new URL(m.kernels[i].file, murl)}: ${text}`);
      }
    });
    const usage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST;
    this._buffers = m.buffers.map((b) => d.createBuffer({ size: b.size, usage, label: b.name || `${b.kind}${b.id}` }));
    this._stateInit = new Map();
    for (const b of m.buffers) {
      if (b.offset === undefined || b.nbytes === 0) continue;
      const padded = new Uint8Array(b.size);
      padded.set(new Uint8Array(weights, b.offset, b.nbytes));
      d.queue.writeBuffer(this._buffers[b.id], 0, padded);
      if (b.kind === "state") this._stateInit.set(b.id, padded);
    }
    const layouts = new Map();
    const layoutOf = (bindings, uniform) => {
      const key = bindings.map((b) => (b.write ? "w" : "r")).join("") + (uniform ? "u" : "");
      let hit = layouts.get(key);
      if (!hit) {
        const entries = bindings.map((b, i) => ({
          binding: i, visibility: GPUShaderStage.COMPUTE,
          buffer: { type: b.write ? "storage" : "read-only-storage" },
        }));
        if (uniform) entries.push({ binding: bindings.length, visibility: GPUShaderStage.COMPUTE, buffer: { type: "uniform" } });
        const bgl = d.createBindGroupLayout({ entries });
        hit = { bgl, layout: d.createPipelineLayout({ bindGroupLayouts: [bgl] }) };
        layouts.set(key, hit);
      }
      return hit;
    };
    const pipelines = new Map();
    const pending = [];
    const stepsOf = (dispatches) => dispatches.map((disp) => {
      const { bgl, layout } = layoutOf(disp.bindings, !!disp.uniform);
      const pkey = `${disp.kernel}|${disp.bindings.map((b) => (b.write ? "w" : "r")).join("")}|${!!disp.uniform}`;
      let pipe = pipelines.get(pkey);
      if (!pipe) {
        const k = m.kernels[disp.kernel];
        pipe = d.createComputePipelineAsync({ layout, compute: { module: modules[disp.kernel], entryPoint: k.entry } });
        pipelines.set(pkey, pipe);
        pending.push(pipe);
      }
      let uniform = null;
      if (disp.uniform) {
        const words = new Uint32Array(Math.max(4, Math.ceil(disp.uniform.length / 4) * 4));
        words.set(disp.uniform);
        uniform = d.createBuffer({ size: words.byteLength, usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST });
        d.queue.writeBuffer(uniform, 0, words);
      }
      return { pipeline: pipe, bgl, bindings: disp.bindings, uniform, workgroups: disp.workgroups };
    });
    for (const e of this._entryList) {
      e._steps = stepsOf(e._spec.dispatches);
      e._groups = new Map();
      this._bindGroups(e);
      e._staging = e._spec.outputs.map((o) => d.createBuffer({
        size: m.buffers[o.buffer].size, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST,
      }));
    }
    const resolved = await Promise.all(pending);
    const byPromise = new Map(pending.map((p, i) => [p, resolved[i]]));
    for (const e of this._entryList) for (const st of e._steps) st.pipeline = byPromise.get(st.pipeline);
    const err = await d.popErrorScope();
    if (err) throw new Error(`WebGPU rejected the bundle ${murl}: ${err.message}`);
  }

  // The GPU buffer that plays the manifest's buffer `id` now (a state and its partner swap roles).
  _buf(id) {
    const r = this._remap.get(id);
    return this._buffers[r === undefined ? id : r];
  }

  _flip(stateBuffer) {
    if (this._flipped.has(stateBuffer)) this._flipped.delete(stateBuffer);
    else this._flipped.add(stateBuffer);
    this._remap.clear();
    const partners = new Map(this._stateSpecs.map((s) => [s.buffer, s.partner]));
    for (const b of this._flipped) {
      this._remap.set(b, partners.get(b));
      this._remap.set(partners.get(b), b);
    }
    this._flipKey = Array.from(this._flipped).sort((a, b) => a - b).join(",");
  }

  // The entry's bind groups for the current roles of the state buffers (made once per arrangement).
  _bindGroups(entry) {
    let groups = entry._groups.get(this._flipKey);
    if (!groups) {
      groups = entry._steps.map((st) => {
        const entries = st.bindings.map((b, i) => ({ binding: i, resource: { buffer: this._buf(b.buffer) } }));
        if (st.uniform) entries.push({ binding: st.bindings.length, resource: { buffer: st.uniform } });
        return this.device.createBindGroup({ layout: st.bgl, entries });
      });
      entry._groups.set(this._flipKey, groups);
    }
    return groups;
  }

  _encodeInputs(entry, inputs) {
    const specs = entry._spec.inputs;
    const names = specs.map((s) => `"${s.name}"`).join(", ") || "none";
    const call = this._entryList.length === 1 ? "model.run" : `model.entries.${entry.name}.run`;
    if (inputs === null || typeof inputs !== "object" || Array.isArray(inputs) || ArrayBuffer.isView(inputs)) {
      throw new TypeError(`${call} takes an object mapping input names (${names}) to typed arrays, ` +
        `got ${describe(inputs)}`);
    }
    for (const key of Object.keys(inputs)) {
      if (!specs.some((s) => s.name === key)) {
        const isState = this._stateSpecs.some((s) => s.name === key);
        throw new TypeError(`unknown input "${key}": this model's inputs are ${names}` +
          (isState ? ` ("${key}" is state, kept on the GPU: model.writeState sets it)` : ""));
      }
    }
    return specs.map((s) => {
      const value = inputs[s.name];
      checkValue(s, value, "input");
      return [this._buf(s.buffer), toBytes(s, value, this.manifest.buffers[s.buffer].size)];
    });
  }

  /**
   * Run the function on `inputs` ({name: typed array}) in a bundle of one function.
   * @returns {Promise<Array<TypedArray>>} the outputs in the order of the function's flattened outputs.
   */
  run(inputs) {
    let entry;
    try {
      entry = this._only("run");
    } catch (e) {
      return Promise.reject(e);
    }
    return entry.run(inputs);
  }

  _enqueue(work) {
    const result = this._last.then(work);
    this._last = result.catch(() => undefined);
    return result;
  }

  _usable() {
    if (this._lost) throw new Error(`the WebGPU device was lost (${this._lost.message}); load the model again`);
    if (!this._buffers) throw new Error("this model was destroyed; load it again");
  }

  async _run(entry, inputs) {
    this._usable();
    const writes = this._encodeInputs(entry, inputs);
    const d = this.device;
    d.pushErrorScope("validation");
    for (const [buffer, bytes] of writes) {
      if (bytes.byteLength) d.queue.writeBuffer(buffer, 0, bytes);
    }
    const encoder = d.createCommandEncoder();
    if (entry._steps.length) {
      const groups = this._bindGroups(entry);
      const pass = encoder.beginComputePass();
      entry._steps.forEach((st, i) => {
        pass.setPipeline(st.pipeline);
        pass.setBindGroup(0, groups[i]);
        pass.dispatchWorkgroups(st.workgroups[0], st.workgroups[1], st.workgroups[2]);
      });
      pass.end();
    }
    const outs = entry._spec.outputs;
    outs.forEach((o, i) => {
      encoder.copyBufferToBuffer(this._buf(o.buffer), 0, entry._staging[i], 0, entry._staging[i].size);
    });
    // The state's new values replace the old after the pass (and after the outputs were copied out): copied,
    // or, when the pass wrote them into the state's partner, by the two buffers swapping roles.
    const updates = entry._spec.state_updates || [];
    for (const u of updates) {
      if (!u.swap) encoder.copyBufferToBuffer(this._buf(u.from), 0, this._buf(u.to), 0, this.manifest.buffers[u.to].size);
    }
    d.queue.submit([encoder.finish()]);
    for (const u of updates) if (u.swap) this._flip(u.to);
    const err = await d.popErrorScope();
    if (err) throw new Error(`WebGPU rejected a run of ${entry.name}: ${err.message}`);
    await Promise.all(entry._staging.map((s) => s.mapAsync(GPUMapMode.READ)));
    return outs.map((o, i) => {
      const out = fromMapped(o, entry._staging[i].getMappedRange());
      entry._staging[i].unmap();
      return out;
    });
  }

  _stateSpec(name) {
    const spec = this._stateSpecs.find((s) => s.name === name);
    if (!spec) {
      const names = this._stateSpecs.map((s) => `"${s.name}"`).join(", ") || "none";
      throw new TypeError(`unknown state "${name}": this model's state is ${names}`);
    }
    return spec;
  }

  /** Put every state buffer back to its exported value (zeros unless the export gave another). */
  resetState() {
    return this._enqueue(async () => {
      this._usable();
      for (const b of Array.from(this._flipped)) this._flip(b);
      for (const s of this._stateSpecs) {
        const size = this.manifest.buffers[s.buffer].size;
        this.device.queue.writeBuffer(this._buffers[s.buffer], 0, this._stateInit.get(s.buffer) || new Uint8Array(size));
      }
    });
  }

  /** Replace the state leaf `name` with `value` (a typed array of its dtype and element count). */
  writeState(name, value) {
    return this._enqueue(async () => {
      this._usable();
      const s = this._stateSpec(name);
      checkValue(s, value, "state");
      this.device.queue.writeBuffer(this._buf(s.buffer), 0, toBytes(s, value, this.manifest.buffers[s.buffer].size));
    });
  }

  /** Read the state leaf `name` back from the GPU (a copy; runs never read state back). */
  readState(name) {
    return this._enqueue(async () => {
      this._usable();
      const s = this._stateSpec(name);
      const size = this.manifest.buffers[s.buffer].size;
      const staging = this.device.createBuffer({ size, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
      const encoder = this.device.createCommandEncoder();
      encoder.copyBufferToBuffer(this._buf(s.buffer), 0, staging, 0, size);
      this.device.queue.submit([encoder.finish()]);
      await staging.mapAsync(GPUMapMode.READ);
      const out = fromMapped(s, staging.getMappedRange());
      staging.destroy();
      return out;
    });
  }

  /** Free the model's GPU buffers (and its device, when loadModel made it). */
  destroy() {
    for (const b of this._buffers || []) b.destroy();
    for (const e of this._entryList) for (const b of e._staging || []) b.destroy();
    this._buffers = null;
    if (this._ownsDevice) this.device.destroy();
  }
}
