"""Static files of the live dashboard (served by :mod:`tessera.live.api`)."""
