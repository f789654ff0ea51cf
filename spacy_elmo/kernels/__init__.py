"""The biLM's fast paths below PyTorch's eager code: routed matrix products (:mod:`.matmul`),
bfloat16 inference (:mod:`.bf16`) and training (:mod:`.fused_train`, :mod:`.char_conv_train`),
and the compiled C kernels they call (:mod:`.native`, built, verified and loaded by :mod:`.build`
from the private folder of :mod:`.folder`; source in ``csrc/``); :mod:`.cpu` reads the CPU's
identity and features for all of them."""
