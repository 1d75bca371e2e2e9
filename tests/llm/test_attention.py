"""`model.sdpa_backends`: the attention kernels a CUDA forward may use (scgmem/llm/local/attention.py)."""
import contextlib

import pytest
import torch

from scgmem.llm.local.attention import attention_kernels, check_backends


def test_default_names_validate_and_none_means_torch_choice():
    assert check_backends(["flash", "efficient", "math"]) == ("flash", "efficient", "math")
    assert check_backends(None) is None


@pytest.mark.parametrize("names", [["cudnn", "fast"], []])
def test_bad_names_fail_with_the_config_key(names):
    with pytest.raises(ValueError, match="model.sdpa_backends"):
        check_backends(names)


def test_cpu_forwards_are_left_alone():
    assert isinstance(attention_kernels(torch.device("cpu"), ("math",)), contextlib.nullcontext)
    assert isinstance(attention_kernels(torch.device("cuda"), None), contextlib.nullcontext)


def test_cuda_forwards_exclude_cudnn_inside_the_context_only():
    # The context sets torch's global SDPA switches, which exist without a GPU.
    before = torch.backends.cuda.cudnn_sdp_enabled()
    with attention_kernels(torch.device("cuda", 0), ("flash", "efficient", "math")):
        assert not torch.backends.cuda.cudnn_sdp_enabled()
        assert torch.backends.cuda.flash_sdp_enabled() and torch.backends.cuda.mem_efficient_sdp_enabled()
    assert torch.backends.cuda.cudnn_sdp_enabled() == before
