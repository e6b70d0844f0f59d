"""Help texts of the compression flags that ``tessera train`` and ``tessera plan`` share (one
text per flag, so the two commands describe it alike)."""

COMPRESS_HELP = ("Gradient compression: none, fp16, bf16, powersgd[:rank=R,start=S] (PyTorch's "
                 "hooks) or 3lc[:s=S] (3-value quantisation, zero runs, error feedback); "
                 "tessera plan also takes auto (the scheme with the lowest predicted step time).")
LINK_GBPS_HELP = ("A slow link of G gigabits/s between the ranks (tessera train: emulated, the "
                  "exchange lasts as long as a ring of the bytes actually sent takes on it) or "
                  "between the servers (tessera plan), e.g. 1 or 10.")
