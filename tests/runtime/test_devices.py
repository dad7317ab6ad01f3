"""zsnli.runtime.devices: where tensors go, TF32 around a block, and the torch build line of the start-up log."""

from __future__ import annotations

import pytest
import torch

from zsnli.runtime import devices


def test_placement_is_the_name_unless_a_stand_in_is_set_and_stand_ins_nest():
    assert [devices.placement(d) for d in ("cpu", "cuda", "cuda:1")] == ["cpu", "cuda", "cuda:1"]
    with devices.computed_on("cuda"):
        assert [devices.placement(d) for d in ("cpu", "cuda", "cuda:1")] == ["cpu", "cpu", "cpu"]
        with devices.computed_on("cuda", "meta"):
            assert devices.placement("cuda:0") == "meta"
        assert devices.placement("cuda:0") == "cpu"
    assert devices.placement("cuda") == "cuda"


def test_tf32_only_inside_the_block_and_only_for_cuda():
    matmul = torch.backends.cuda.matmul
    before = matmul.fp32_precision
    with devices.tf32_matmuls("cpu"):
        assert matmul.fp32_precision == before
    with devices.tf32_matmuls("cuda:0"):
        assert matmul.fp32_precision == "tf32"
    assert matmul.fp32_precision == before
    with pytest.raises(RuntimeError), devices.tf32_matmuls("cuda"):
        raise RuntimeError("a failing forward")
    assert matmul.fp32_precision == before


def test_nvidia_devices_are_the_numbered_device_nodes(tmp_path):
    assert not devices.nvidia_devices_present(str(tmp_path))
    (tmp_path / "nvidiactl").write_text("")
    (tmp_path / "nvidia-uvm").write_text("")
    assert not devices.nvidia_devices_present(str(tmp_path))
    (tmp_path / "nvidia0").write_text("")
    assert devices.nvidia_devices_present(str(tmp_path))


def test_the_torch_build_line_says_cuda_or_a_cpu_build_unused_beside_a_gpu(monkeypatch):
    from zsnli.bench.fake_cuda import FAKE_CUDA_VERSION, FAKE_GPU_NAME, fake_cuda

    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setattr(devices, "nvidia_devices_present", lambda root="/dev": False)
    assert devices.torch_build() == f"torch {torch.__version__}, a CPU-only build"
    monkeypatch.setattr(devices, "nvidia_devices_present", lambda root="/dev": True)
    line = devices.torch_build()
    assert "a CPU-only build: the NVIDIA GPU on this machine is NOT used" in line and "TORCH_VARIANT=cuda" in line
    with fake_cuda():
        assert devices.torch_build() == f"torch {torch.__version__}, CUDA {FAKE_CUDA_VERSION}, 1 GPU: {FAKE_GPU_NAME}"


def test_the_loader_warns_when_a_cpu_torch_serves_beside_a_gpu(bert_dir, monkeypatch, caplog):
    from conftest import make_settings

    from zsnli.serving import startup

    monkeypatch.setattr(startup, "nvidia_devices_present", lambda: True)
    with caplog.at_level("INFO", logger="zsnli"):
        startup.default_loader(make_settings(bert_dir, device="cpu"))
    (record,) = [r for r in caplog.records if "serving on" in r.getMessage()]
    assert record.levelname == "WARNING" and record.getMessage().endswith("; serving on the cpu")
