"""One package per paper family, peers of each other: each builds its protocols on ``fedray.core``."""
