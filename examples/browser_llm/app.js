// The text page: continue the text as it is typed, with the model's prefill and decode entry points.
//
// The bundle (model/, written by export_llm.py) has two entry points sharing the weights and the caches:
// prefill ({ids: int32[1, chunk], pos, u, temperature}) and decode ({ids: int32[1, 1], pos, u, temperature}),
// each writing its positions into the key/value caches (state kept on the GPU) from `pos` and returning the
// next character id, picked on the GPU: the most likely at temperature 0, else drawn with the uniform `u`.
// `cached` mirrors which ids the caches hold, position by position: a new text reuses its common prefix with
// them, so typing one more character costs one decode step.

import { loadModel, webgpuAvailable, ENABLE_WEBGPU_HELP } from "./model/fnarray-webgpu.js";

const status = document.getElementById("status");
const prompt = document.getElementById("prompt");
const echo = document.getElementById("echo");
const continuation = document.getElementById("continuation");
const speed = document.getElementById("speed");
const modelInfo = document.getElementById("model-info");
const temperatureInput = document.getElementById("temperature");
const temperatureText = document.getElementById("temperature-value");

let model = null;
let cfg = null;        // vocab.json: vocab, unknown, capacity, chunk, new_tokens, model
let ids = null;        // character -> id
let cached = [];       // the ids whose keys and values the caches hold, position by position
let wanted = null;     // the next text to continue (null: none waiting)
let busy = false;
let resetPending = false;  // the "Clear the cache" button: model.resetState() before the next generation

function setStatus(text, kind) {
  status.textContent = text;
  status.className = kind || "";
}

function encode(text) {
  const unknown = ids.get(cfg.unknown);
  return Array.from(text, (c) => (ids.has(c) ? ids.get(c) : unknown));
}

function decode(tokens) {
  return tokens.map((t) => cfg.vocab[t]).join("");
}

// One run of an entry: `tokens` written at `pos`, the next id picked at `temperature` with the uniform `u`.
async function step(entry, tokens, pos, u, temperature) {
  const [next] = await model.entries[entry].run({
    ids: Int32Array.from(tokens), pos: Int32Array.of(pos), u: Float32Array.of(u),
    temperature: Float32Array.of(temperature),
  });
  return next[0];
}

// Write `text` (ids) into the caches after the prefix they already hold: chunks through prefill, the rest one
// by one through decode. Returns the id after the last one and how many positions were reused.
async function feed(text, u, temperature) {
  let start = 0;
  while (start < cached.length && start < text.length - 1 && cached[start] === text[start]) start++;
  cached.length = start;
  let next;
  let pos = start;
  while (text.length - pos >= cfg.chunk) {
    next = await step("prefill", text.slice(pos, pos + cfg.chunk), pos, u, temperature);
    cached.push(...text.slice(pos, pos + cfg.chunk));
    pos += cfg.chunk;
  }
  while (pos < text.length) {
    next = await step("decode", [text[pos]], pos, u, temperature);
    cached.push(text[pos]);
    pos += 1;
  }
  return { next, reused: start };
}

async function generate(text) {
  const all = encode(text);
  const tokens = all.slice(Math.max(0, all.length - (cfg.capacity - cfg.new_tokens)));
  echo.textContent = text;
  continuation.textContent = "";
  continuation.dataset.done = "no";
  if (!tokens.length) {
    speed.textContent = "";
    return;
  }
  // The uniform numbers of the draws (unused at temperature 0), as float32: the page shows them for checking.
  const temperature = Number(temperatureInput.value);
  const uniforms = Float32Array.from({ length: cfg.new_tokens }, () => Math.random());
  const t0 = performance.now();
  const { next, reused } = await feed(tokens, uniforms[0], temperature);
  const t1 = performance.now();
  const out = [next];
  continuation.textContent = decode(out);
  while (out.length < cfg.new_tokens) {
    if (wanted !== null) return;           // the text changed: start again from it
    const last = out[out.length - 1];
    const pos = cached.length;
    out.push(await step("decode", [last], pos, uniforms[out.length], temperature));
    cached.push(last);
    continuation.textContent = decode(out);
  }
  const t2 = performance.now();
  const perSecond = (out.length - 1) / ((t2 - t1) / 1000);
  speed.textContent = `${perSecond.toFixed(1)} tokens/s: ${out.length - 1} decode steps in ${(t2 - t1).toFixed(0)} ms` +
    ` · text: ${tokens.length} characters in ${(t1 - t0).toFixed(0)} ms (${reused} from the cache)`;
  speed.dataset.tokensPerSecond = String(perSecond);
  continuation.dataset.ids = JSON.stringify(out);
  continuation.dataset.prompt = text;
  continuation.dataset.reused = String(reused);
  continuation.dataset.temperature = String(temperature);
  continuation.dataset.uniforms = JSON.stringify(Array.from(uniforms));
  continuation.dataset.done = "yes";
  continuation.dataset.runs = String(Number(continuation.dataset.runs) + 1);
}

// One generation at a time: a newer text waits in `wanted` and the running one stops at its next step.
async function worker() {
  if (busy) return;
  busy = true;
  try {
    while (wanted !== null) {
      const text = wanted;
      wanted = null;
      if (resetPending) {
        resetPending = false;
        await model.resetState();
        cached = [];
      }
      await generate(text);
    }
  } catch (e) {
    setStatus(`Generation failed: ${e.message}`, "error");
  } finally {
    busy = false;
  }
}

function request() {
  wanted = prompt.value;
  worker();
}

async function start() {
  cfg = await (await fetch("./vocab.json")).json();
  ids = new Map(Array.from(cfg.vocab, (c, i) => [c, i]));
  model = await loadModel("./model/");
  modelInfo.textContent = `${cfg.model}; cache of ${cfg.capacity} positions, prefill ${cfg.chunk} at a time, ` +
    `${cfg.new_tokens} characters generated (the text's last ${cfg.capacity - cfg.new_tokens} are read).`;
  prompt.addEventListener("input", request);
  temperatureInput.addEventListener("input", () => {
    temperatureText.textContent = Number(temperatureInput.value) > 0 ? temperatureInput.value : "0 (greedy)";
    request();
  });
  document.getElementById("reset").addEventListener("click", () => {
    resetPending = true;
    request();
  });
}

if (!webgpuAvailable()) {
  setStatus(ENABLE_WEBGPU_HELP, "error");
  document.body.dataset.ready = "no-webgpu";
} else {
  start()
    .then(() => {
      setStatus("Model loaded: type, and the blue text continues yours.", "ready");
      document.body.dataset.ready = "yes";
      request();
    })
    .catch((e) => {
      setStatus(`Could not load the model: ${e.message}`, "error");
      document.body.dataset.ready = "error";
    });
}
