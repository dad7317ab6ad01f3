"""zsnli.runtime.precision: the default serving dtype as a pure function of the device and its flags."""

from __future__ import annotations

import pytest

from zsnli.config import FIXED_SHAPES, Settings, SettingsError
from zsnli.runtime.precision import (FIXED_SHAPES_MODES, choose_dtype, cpu_flags, fixed_shapes_for)

AVX512_BF16 = {"fpu", "avx2", "avx512f", "avx512_vnni", "avx512_bf16"}  # the AMD EPYC dev machine
AMX = {"avx2", "avx512f", "amx_tile", "amx_bf16", "amx_int8"}  # Sapphire Rapids
AVX2 = {"fpu", "sse4_2", "avx", "avx2", "fma"}


@pytest.mark.parametrize(("flags", "name", "reason"), [
    (AVX512_BF16, "float32", "cpu has avx512_bf16; bf16 in fixed shapes is no faster"),
    (AMX, "float32", "cpu has amx_bf16; bf16 in fixed shapes is no faster"),
    (AVX512_BF16 | {"amx_bf16"}, "float32", "cpu has amx_bf16; bf16 in fixed shapes is no faster"),
    (AVX2, "float32", "cpu has neither amx_bf16 nor avx512_bf16"),
    (set(), "float32", "cpu has neither amx_bf16 nor avx512_bf16"),
])
def test_cpu_default_follows_the_native_bf16_flags(flags, name, reason):
    choice = choose_dtype(None, "cpu", flags)
    assert (choice.name, choice.reason) == (name, reason)
    assert str(choice) == f"{name} ({reason})"


@pytest.mark.parametrize(("device", "cuda_bf16", "name"), [
    ("cuda", True, "bfloat16"), ("cuda:1", True, "bfloat16"), ("cuda", False, "float32"), ("mps", True, "float32"),
])
def test_gpu_default_follows_the_devices_bf16_support(device, cuda_bf16, name):
    assert choose_dtype(None, device, AVX512_BF16, cuda_bf16=cuda_bf16).name == name


@pytest.mark.parametrize(("requested", "name"), [("fp32", "float32"), ("BF16", "bfloat16"), ("torch.float16", "float16")])
def test_a_set_dtype_wins_and_is_named_as_the_reason(requested, name):
    for flags in (AVX512_BF16, AVX2):
        choice = choose_dtype(requested, "cpu", flags)
        assert choice.name == name and choice.reason == f"ZSNLI_DTYPE={requested}"


def test_cpu_flags_are_read_from_cpuinfo(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu avx2 avx512_bf16\n\n"
                    "processor\t: 1\nflags\t\t: fpu\n", encoding="utf-8")
    assert cpu_flags(info) == {"fpu", "avx2", "avx512_bf16"}
    assert cpu_flags(tmp_path / "absent") == frozenset()


@pytest.mark.parametrize(("mode", "dtype", "on"), [
    ("auto", "bfloat16", True), ("auto", "float16", True), ("auto", "float32", False), ("auto", "fp32", False),
    ("on", "float32", True), ("off", "bfloat16", False),
])
def test_fixed_shapes_are_on_for_reduced_precision_unless_set(mode, dtype, on):
    assert fixed_shapes_for(mode, dtype) is on


def test_fixed_shapes_setting_is_one_line_naming_it():
    assert set(FIXED_SHAPES) == set(FIXED_SHAPES_MODES)
    assert Settings.from_env({"ZSNLI_FIXED_SHAPES": " ON "}).fixed_shapes == "on"
    assert Settings.from_env({}).fixed_shapes == "auto"
    with pytest.raises(SettingsError, match="^ZSNLI_FIXED_SHAPES must be one of auto, on, off, got 'yes'$"):
        Settings.from_env({"ZSNLI_FIXED_SHAPES": "yes"})
