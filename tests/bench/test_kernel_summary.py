"""What a profiled decode window ran, by class: kernel names sorted, CPU ops counted, busy time and gaps."""

from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from bench.profiling import KERNEL_CLASSES, OTHER_CLASS, kernel_class, kernel_summary, timeline

# Kernel names as CUDA runs of the compiled decode step report them (cuBLAS, flash/efficient/cuDNN attention,
# inductor's triton kernels, ATen's kernels, copies), and ATen op names as the CPU profiler reports them.
NAMES = {
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64": "gemm",
    "nvjet_tst_64x8_64x16_4x1_v_bz_TNT": "gemm",
    "void gemv2T_kernel_val<int, int, __nv_bfloat16, __nv_bfloat16, float, 128, 16, 4, 4>": "gemm",
    "triton_tem_fused_mm_3": "gemm",
    "void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_128x2_tn_align8>": "gemm",
    "void pytorch_flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4>>": "attention",
    "fmha_cutlassF_bf16_aligned_64x64_rf_sm80": "attention",
    "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x128": "attention",
    "triton_red_fused__softmax_argmax_div_exponential_7": "sampling",
    "void at::native::(anonymous namespace)::distribution_elementwise_grid_stride_kernel<float, 4, "
    "exponential_kernel>": "sampling",
    "triton_per_fused__to_copy_add_mean_mul_pow_rsqrt_1": "fused_triton",
    "triton_poi_fused_add_cat_index_copy_mul_2": "fused_triton",
    "Memcpy HtoD (Pageable -> Device)": "memcpy",
    "Memset (Device)": "memcpy",
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>": "elementwise",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>": "elementwise",
    "void at::native::unrolled_elementwise_kernel<OperandsFunctor>": "elementwise",
    "aten::mm": "gemm", "aten::addmm": "gemm", "aten::linear": "gemm",
    "aten::_scaled_dot_product_flash_attention_for_cpu": "attention",
    "aten::exponential_": "sampling", "aten::argmax": "sampling", "aten::log_softmax": "sampling",
    "aten::index_copy_": "memcpy", "aten::copy_": "memcpy",
    "aten::mul": "elementwise", "aten::rsqrt": "elementwise",
    "cudaGraphLaunch": OTHER_CLASS,
}


@pytest.mark.parametrize("name,expected", sorted(NAMES.items()))
def test_kernel_and_op_names_fall_into_their_class(name, expected):
    assert kernel_class(name) == expected


def test_every_class_is_named_by_some_kernel():
    assert {cls for cls, _ in KERNEL_CLASSES} | {OTHER_CLASS} == set(NAMES.values())


def test_timeline_merges_overlaps_and_measures_the_gaps():
    t = timeline([(0.0, 10.0), (5.0, 12.0), (20.0, 30.0), (31.0, 32.0)], token_steps=2)
    assert t["busy_us"] == 23 and t["span_us"] == 32 and t["idle_fraction"] == pytest.approx(9 / 32)
    assert t["gaps"] == {"count": 2, "per_token": 1.0, "total_us": 9.0, "median_us": 4.5, "max_us": 8.0}
    assert t["busy_us_per_token"] == 11.5
    assert timeline([], 1)["idle_fraction"] is None


def _decode_like_step(x, w, q, k, v):
    h = (x @ w).view(-1)  # a view: no kernel
    a = F.scaled_dot_product_attention(q, k, v)
    probs = (h[None, :] * 2).softmax(-1)
    token = (probs / torch.empty_like(probs).exponential_()).argmax(-1)
    return token, a


def test_a_cpu_profile_is_summarised_by_its_outermost_ops_per_token():
    x, w = torch.randn(1, 32), torch.randn(32, 64)
    q = k = v = torch.randn(1, 2, 4, 8)
    steps = 5
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            _decode_like_step(x, w, q, k, v)
    summary = kernel_summary(prof.events(), steps)
    assert summary["source"] == "cpu ops" and summary["token_steps"] == steps
    by_class = summary["by_class"]
    assert by_class["gemm"]["per_token"] == 1  # the matmul, counted once though it calls mm inside
    assert by_class["attention"]["per_token"] == 1
    assert by_class["sampling"]["per_token"] == 3  # softmax, exponential_, argmax
    assert "aten::view" not in {k["name"] for k in summary["longest"]}
    assert summary["kernels_per_token"] == sum(c["per_token"] for c in by_class.values())
    assert sum(c["share"] for c in by_class.values()) == pytest.approx(1.0)
    assert 0 < summary["busy_us"] <= summary["span_us"] and 0 <= summary["idle_fraction"] < 1
    assert summary["gaps"]["count"] <= summary["kernels"] - 1


@dataclass
class _Range:
    start: float
    end: float


@dataclass
class _Event:
    name: str
    start: float
    end: float
    device_type: DeviceType = DeviceType.CUDA
    is_user_annotation: bool = False
    activity_type: str = "kernel"
    cpu_parent: object = None

    @property
    def time_range(self):
        return _Range(self.start, self.end)


def test_device_kernels_win_over_cpu_ops_and_annotations_are_not_kernels():
    events = [
        _Event("aten::mm", 0, 50, DeviceType.CPU),  # the host side: not counted once the device's are there
        _Event("rollout.decode", 0, 100, is_user_annotation=True, activity_type="gpu_user_annotation"),
        _Event("cudaStreamSynchronize", 50, 100, activity_type="cuda_sync"),
        _Event("nvjet_tst_64x8_64x16_4x1_v_bz_TNT", 10, 20),
        _Event("pytorch_flash::flash_fwd_splitkv_kernel", 20, 25),
        _Event("triton_red_fused__softmax_argmax_div_exponential_7", 30, 34),
        _Event("nvjet_tst_64x8_64x16_4x1_v_bz_TNT", 40, 50),
    ]
    summary = kernel_summary(events, token_steps=2)
    assert summary["source"] == "device kernels" and summary["kernels"] == 4 and summary["kernels_per_token"] == 2
    assert {c: v["count"] for c, v in summary["by_class"].items()} == {"gemm": 2, "attention": 1, "sampling": 1}
    assert list(summary["by_class"]) == ["gemm", "attention", "sampling"]  # longest first
    assert summary["busy_us"] == 29 and summary["span_us"] == 40 and summary["gaps"]["total_us"] == 11
    with pytest.raises(ValueError, match="token_steps"):
        kernel_summary(events, 0)
