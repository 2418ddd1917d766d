// The digits page: draw or pick an image, downsample it as the data set was made, classify through WebGPU.
//
// scikit-learn's digits are 32x32 black-and-white bitmaps of a digit scaled to fit the box, counted in
// 4x4 blocks: each of the 8x8 pixels is 0..16. A drawing goes the same way: its bounding box is made
// square and split into 32x32 cells, a cell is "on" when ink covers enough of it, and the on-cells are
// counted per 4x4 block. The model takes those counts divided by 16 (float32[1, 64]).

import { loadModel, webgpuAvailable, ENABLE_WEBGPU_HELP } from "./model/fnarray-webgpu.js";

const status = document.getElementById("status");
const pad = document.getElementById("pad");
const grid = document.getElementById("input-grid");
const prediction = document.getElementById("prediction");
const bars = document.getElementById("bars");
const barLabels = document.getElementById("bar-labels");
const gallery = document.getElementById("gallery");
const pickedLabel = document.getElementById("picked-label");
const ctx = pad.getContext("2d", { willReadFrequently: true });
const choice = document.getElementById("model-choice");
const answeredBy = document.getElementById("answered-by");

const INK_THRESHOLD = 0.3;  // fraction of a 32x32 cell that ink must cover for the cell to be on
// The exported models (models.json, written by export_digits.py): name -> {label, dir, model once loaded}.
const models = new Map();
let lastCounts = null;

function currentModel() {
  return models.get(choice.value);
}

function setStatus(text, kind) {
  status.textContent = text;
  status.className = kind || "";
}

// ------------------------------------------------------------------ the bar chart and the 8x8 view
const fills = [];
for (let d = 0; d < 10; d++) {
  const bar = document.createElement("div");
  bar.className = "bar";
  bar.innerHTML = `<span class="pct"></span><div class="fill" style="height:0%"></div>`;
  bars.appendChild(bar);
  fills.push(bar);
  const label = document.createElement("span");
  label.textContent = String(d);
  barLabels.appendChild(label);
}

function showProbabilities(probs) {
  let best = 0;
  for (let d = 1; d < 10; d++) if (probs[d] > probs[best]) best = d;
  fills.forEach((bar, d) => {
    bar.querySelector(".fill").style.height = `${(100 * probs[d]).toFixed(1)}%`;
    bar.querySelector(".pct").textContent = `${Math.round(100 * probs[d])}%`;
    bar.classList.toggle("best", d === best);
  });
  prediction.textContent = String(best);
  prediction.dataset.probs = JSON.stringify(Array.from(probs));
  prediction.dataset.runs = String(Number(prediction.dataset.runs) + 1);
}

const cells = [];
for (let i = 0; i < 64; i++) {
  const c = document.createElement("div");
  grid.appendChild(c);
  cells.push(c);
}

function showInput(counts) {
  counts.forEach((v, i) => {
    const level = Math.round(255 * (1 - v / 16));
    cells[i].style.background = `rgb(${level}, ${level}, ${level})`;
  });
  grid.dataset.values = JSON.stringify(counts);
}

// ------------------------------------------------------------------ drawing -> 8x8 counts
function clearPad() {
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, pad.width, pad.height);
}

function drawingToCounts() {
  const { width: W, height: H } = pad;
  const px = ctx.getImageData(0, 0, W, H).data;
  const ink = new Float32Array(W * H);
  let x0 = W, y0 = H, x1 = -1, y1 = -1;
  for (let y = 0; y < H; y++) {
    for (let x = 0; x < W; x++) {
      const v = 1 - px[4 * (y * W + x)] / 255;
      ink[y * W + x] = v;
      if (v > 0.1) {
        if (x < x0) x0 = x;
        if (x > x1) x1 = x;
        if (y < y0) y0 = y;
        if (y > y1) y1 = y;
      }
    }
  }
  if (x1 < 0) return null;
  const side = Math.max(x1 - x0 + 1, y1 - y0 + 1);
  const left = (x0 + x1 + 1) / 2 - side / 2;
  const top = (y0 + y1 + 1) / 2 - side / 2;
  const cover = new Float32Array(32 * 32);
  for (let y = y0; y <= y1; y++) {
    const r = Math.min(31, Math.floor(((y - top) * 32) / side));
    for (let x = x0; x <= x1; x++) {
      const c = Math.min(31, Math.floor(((x - left) * 32) / side));
      cover[r * 32 + c] += ink[y * W + x];
    }
  }
  const cellArea = (side / 32) ** 2;
  const counts = new Array(64).fill(0);
  for (let r = 0; r < 32; r++) {
    for (let c = 0; c < 32; c++) {
      if (cover[r * 32 + c] / cellArea >= INK_THRESHOLD) counts[(r >> 2) * 8 + (c >> 2)] += 1;
    }
  }
  return counts;
}

async function classify(counts) {
  showInput(counts);
  lastCounts = counts;
  const entry = currentModel();
  if (!entry || !entry.model) return;
  try {
    const x = Float32Array.from(counts, (v) => v / 16);
    const [probs] = await entry.model.run({ x });
    answeredBy.textContent = `Answered by the ${entry.label}.`;
    prediction.dataset.model = choice.value;
    showProbabilities(probs);
  } catch (e) {
    setStatus(`Classification failed: ${e.message}`, "error");
  }
}

let drawing = false;
function point(ev) {
  const rect = pad.getBoundingClientRect();
  return [(ev.clientX - rect.left) * (pad.width / rect.width), (ev.clientY - rect.top) * (pad.height / rect.height)];
}
pad.addEventListener("pointerdown", (ev) => {
  drawing = true;
  pad.setPointerCapture(ev.pointerId);
  const [x, y] = point(ev);
  ctx.beginPath();
  ctx.moveTo(x, y);
  ctx.lineTo(x + 0.01, y);
  ctx.stroke();
});
pad.addEventListener("pointermove", (ev) => {
  if (!drawing) return;
  const [x, y] = point(ev);
  ctx.lineTo(x, y);
  ctx.stroke();
});
function endStroke() {
  if (!drawing) return;
  drawing = false;
  gallery.querySelectorAll("canvas").forEach((c) => c.classList.remove("picked"));
  pickedLabel.textContent = "";
  const counts = drawingToCounts();
  if (counts) classify(counts);
}
pad.addEventListener("pointerup", endStroke);
pad.addEventListener("pointercancel", endStroke);
document.getElementById("clear").addEventListener("click", () => {
  clearPad();
  showInput(new Array(64).fill(0));
});

// ------------------------------------------------------------------ test images
async function loadGallery() {
  const images = await (await fetch("./test_images.json")).json();
  images.forEach((img, i) => {
    const c = document.createElement("canvas");
    c.width = 8;
    c.height = 8;
    c.title = `test image ${i} (label ${img.label})`;
    c.dataset.index = String(i);
    const g = c.getContext("2d");
    const data = g.createImageData(8, 8);
    img.pixels.forEach((v, k) => {
      const level = Math.round(255 * (1 - v / 16));
      data.data.set([level, level, level, 255], 4 * k);
    });
    g.putImageData(data, 0, 0);
    c.addEventListener("click", () => {
      gallery.querySelectorAll("canvas").forEach((o) => o.classList.toggle("picked", o === c));
      pickedLabel.textContent = `Test image ${i}: its true label is ${img.label}.`;
      clearPad();
      classify(img.pixels);
    });
    gallery.appendChild(c);
  });
}

// ------------------------------------------------------------------ start
ctx.lineWidth = 16;
ctx.lineCap = "round";
ctx.lineJoin = "round";
ctx.strokeStyle = "#000";
clearPad();
showInput(new Array(64).fill(0));
loadGallery().catch((e) => { pickedLabel.textContent = `Could not load the test images: ${e.message}`; });

if (!webgpuAvailable()) {
  setStatus(ENABLE_WEBGPU_HELP, "error");
  document.body.dataset.ready = "no-webgpu";
} else {
  loadModels()
    .then(() => {
      setStatus("Models loaded: draw a digit (release the mouse to classify) or pick a test image; choose the " +
                "model above the chart.", "ready");
      document.body.dataset.ready = "yes";
    })
    .catch((e) => {
      setStatus(`Could not load the model: ${e.message}`, "error");
      document.body.dataset.ready = "error";
    });
}

async function loadModels() {
  let list = [{ name: "mlp", label: "MLP (64-128-128-10 perceptron)", dir: "./model/" }];
  const listed = await fetch("./models.json");
  if (listed.ok) list = await listed.json();
  for (const entry of list) {
    entry.model = await loadModel(entry.dir);
    models.set(entry.name, entry);
    const option = document.createElement("option");
    option.value = entry.name;
    option.textContent = entry.label;
    choice.appendChild(option);
  }
  choice.addEventListener("change", () => {
    if (lastCounts) classify(lastCounts);
  });
}
