import torch
import torch.distributed as dist

from dpedu import environment_report


def test_report_agrees_with_torch_and_leaves_cuda_alone():
    report = environment_report()
    assert report.torch == torch.__version__
    assert report.cpu_cores >= 1
    assert len(report.gpus) == (torch.cuda.device_count() if torch.cuda.is_available() else 0)
    assert report.backends == {"gloo": dist.is_gloo_available(), "nccl": dist.is_nccl_available(),
                               "mpi": dist.is_mpi_available()}
    assert not torch.cuda.is_initialized()
    text = str(report)
    assert f"torch {torch.__version__}" in text and "gloo yes" in text
