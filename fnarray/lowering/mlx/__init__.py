"""The mlx backend: the IR lowered to ``mlx.core`` (imported lazily)."""
