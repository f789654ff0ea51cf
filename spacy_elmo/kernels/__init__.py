"""The biLM's fast paths below PyTorch's eager code: routed matrix products (:mod:`.matmul`),
bfloat16 inference (:mod:`.bf16`) and training (:mod:`.fused_train`, :mod:`.char_conv_train`),
and the compiled C kernels they call (:mod:`.native`, built, verified and loaded by :mod:`.build`;
source in ``csrc/``)."""
