"""Export the digits classifiers of ``examples/digits_mlp.py`` and ``digits_cnn.py`` as a web page that
classifies in the browser.

The page (``index.html`` + ``app.js`` beside this script) lets you draw a digit
on a canvas, or pick one of the held-out test images, choose the model (the MLP or
the CNN), and shows the class probabilities as a bar chart and which model answered.
They are computed in the browser through WebGPU by the WGSL kernels that
``fnarray.export.webgpu`` writes: the trained parameters are baked into each bundle
(``model/`` for the MLP, ``model_cnn/`` for the CNN, listed in ``models.json``), the
only run-time input is the image ``x`` (float32[1, 64], pixels 0..16 divided by 16,
as in training).

Usage::

    python examples/digits_mlp.py --epochs 30 --save digits.npz
    python examples/digits_cnn.py --epochs 30 --save cnn.npz
    python examples/browser_digits/export_digits.py --params digits.npz --cnn-params cnn.npz --out digits_site
    python -m fnarray.export.serve digits_site          # then open http://127.0.0.1:8000/

Without ``--params`` (``--cnn-params``) the script trains that model first (``--epochs``, on the numpy
backend); ``--no-cnn`` leaves the CNN out.
The export schedules the kernels with the webgpu backend, so it needs ``wgpu`` and a driver
(on Debian/Ubuntu without a GPU: ``apt-get install mesa-vulkan-drivers``).

Importable: ``build_site(out_dir, params, n_test_images=24, cnn_params=None) -> dict`` (the MLP's manifest;
with ``cnn_params`` the CNN's is ``manifest["cnn"]``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # examples/, for digits_mlp

import digits_cnn  # noqa: E402
import digits_mlp  # noqa: E402

import fnarray as fa  # noqa: E402

PAGE_FILES = ("index.html", "app.js")
MODEL_DIR = "model"
CNN_MODEL_DIR = "model_cnn"
MODELS = "models.json"
TEST_IMAGES = "test_images.json"
MLP_LABEL = "MLP (64-128-128-10 perceptron)"
CNN_LABEL = "CNN (2 convolutions + max pooling, 256-128-10)"


def load_params(path, module=digits_mlp) -> dict:
    """The parameters written by ``digits_mlp.py --save`` (or ``module``'s) as float32 NumPy arrays."""
    with np.load(path) as data:
        missing = [k for k in module.PARAM_NAMES if k not in data]
        if missing:
            raise ValueError(f"{path} lacks {', '.join(missing)}; write it with examples/"
                             f"{module.__name__}.py --save")
        return {k: np.asarray(data[k], np.float32) for k in module.PARAM_NAMES}


def build_site(out_dir, params, n_test_images: int = 24, cnn_params=None) -> dict:
    """Write the page, the exported models (``out_dir/model``, ``out_dir/model_cnn``) and some test images.

    Args:
      out_dir: the site folder (created; the page files and the models there are replaced).
      params: the MLP's ``{"w1": f32[64, 128], ..., "b3": f32[10]}`` (``digits_mlp.PARAM_NAMES``).
      n_test_images: how many test-set images the page offers to pick.
      cnn_params: the CNN's parameters (``digits_cnn.PARAM_NAMES``), or ``None`` for a page with the MLP only.
    Returns: the MLP export's manifest, with the CNN's under ``"cnn"`` when there is one.
    """
    params = {k: np.asarray(params[k], np.float32) for k in digits_mlp.PARAM_NAMES}
    os.makedirs(out_dir, exist_ok=True)
    x_example = np.zeros((1, 64), np.float32)
    manifest = fa.export.webgpu(digits_mlp.predict, params, x_example, path=os.path.join(out_dir, MODEL_DIR),
                                bake_argnums=(0,))
    models = [{"name": "mlp", "label": MLP_LABEL, "dir": f"./{MODEL_DIR}/"}]
    if cnn_params is not None:
        cnn_params = {k: np.asarray(cnn_params[k], np.float32) for k in digits_cnn.PARAM_NAMES}
        manifest = dict(manifest, cnn=fa.export.webgpu(digits_cnn.predict, cnn_params, x_example,
                                                       path=os.path.join(out_dir, CNN_MODEL_DIR), bake_argnums=(0,)))
        models.append({"name": "cnn", "label": CNN_LABEL, "dir": f"./{CNN_MODEL_DIR}/"})
    with open(os.path.join(out_dir, MODELS), "w", encoding="utf-8") as fh:
        json.dump(models, fh)
    for name in PAGE_FILES:
        shutil.copyfile(os.path.join(HERE, name), os.path.join(out_dir, name))
    _, x_test, _, y_test = digits_mlp.load_data()
    pixels = np.rint(x_test[:n_test_images] * 16).astype(int)  # back to the data set's 0..16 counts
    images = [{"pixels": p.tolist(), "label": int(y)} for p, y in zip(pixels, y_test[:n_test_images], strict=True)]
    with open(os.path.join(out_dir, TEST_IMAGES), "w", encoding="utf-8") as fh:
        json.dump(images, fh)
    return manifest


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", metavar="PATH", help="parameters from digits_mlp.py --save (default: train now)")
    parser.add_argument("--cnn-params", metavar="PATH",
                        help="parameters from digits_cnn.py --save (default: train now)")
    parser.add_argument("--no-cnn", action="store_true", help="export the MLP only")
    parser.add_argument("--epochs", type=int, default=30, help="epochs to train a model whose parameters are not given")
    parser.add_argument("--out", default="digits_site", help="the site folder to write (default digits_site)")
    parser.add_argument("--test-images", type=int, default=24, help="test images the page offers (default 24)")
    parser.add_argument("--quiet", action="store_true", help="no progress bars while training")
    args = parser.parse_args(argv)
    quiet = ["--quiet"] if args.quiet else []
    if args.params:
        params = load_params(args.params)
    else:
        print(f"no --params: training the MLP first ({args.epochs} epochs on numpy:0, a few seconds; "
              "digits_mlp.py --save PATH makes a file to pass instead)", flush=True)
        params = digits_mlp.main(["--epochs", str(args.epochs), "--device", "numpy:0"] + quiet)["params"]
    cnn = None
    if not args.no_cnn:
        if args.cnn_params:
            cnn = load_params(args.cnn_params, digits_cnn)
        else:
            print(f"no --cnn-params: training the CNN first ({args.epochs} epochs on numpy:0; 30 take about 2 minutes "
                  "on 2 cores; digits_cnn.py --save PATH makes a file to pass instead, --no-cnn skips it)", flush=True)
            cnn = digits_cnn.main(["--epochs", str(args.epochs), "--device", "numpy:0"] + quiet)["params"]
    print(f"exporting the model{'s' if cnn is not None else ''} to {args.out}/ (tracing, WGSL kernels, weights)",
          flush=True)
    manifest = build_site(args.out, params, args.test_images, cnn_params=cnn)
    for folder, m in [(MODEL_DIR, manifest)] + ([(CNN_MODEL_DIR, manifest["cnn"])] if cnn is not None else []):
        print(f"wrote {args.out}/{folder}/: {len(m['kernels'])} WGSL kernels, {len(m['dispatches'])} dispatches, "
              f"{m['weights']['bytes']} bytes of weights")
    print(f"wrote {args.out}/: index.html, app.js, {MODELS}, {TEST_IMAGES}")
    print(f"view it with: python -m fnarray.export.serve {args.out}   (then open http://127.0.0.1:8000/)")


if __name__ == "__main__":
    main()
