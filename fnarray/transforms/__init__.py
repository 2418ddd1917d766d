"""Transforms: IR -> IR rewrites (autodiff, batching, control flow) and jit."""
