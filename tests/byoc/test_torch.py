"""The PyTorch path: torch.export -> TVM's Relax frontend -> tvm_tensil.build."""

import numpy as np
import pytest
import tvm
from tvm import relax

import tvm_tensil

torch = pytest.importorskip("torch")
from tvm.relax.frontend.torch import from_exported_program  # noqa: E402


class SmallCNN(torch.nn.Module):
    """The zoo's small CNN, in PyTorch: (conv-bn-relu-maxpool) x 2, dense, softmax."""

    def __init__(self):
        super().__init__()
        self.c1, self.b1 = torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8)
        self.c2, self.b2 = torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.BatchNorm2d(16)
        self.fc = torch.nn.Linear(16 * 4 * 4, 10)

    def forward(self, x):
        x = torch.nn.functional.max_pool2d(torch.relu(self.b1(self.c1(x))), 2)
        x = torch.nn.functional.max_pool2d(torch.relu(self.b2(self.c2(x))), 2)
        return torch.softmax(self.fc(torch.flatten(x, 1)), 1)


def test_small_cnn_through_torch_export():
    torch.manual_seed(0)
    model = SmallCNN().eval()
    with torch.no_grad():  # non-trivial batch-norm statistics, so that folding matters
        for bn in (model.b1, model.b2):
            bn.running_mean.uniform_(-0.2, 0.2)
            bn.running_var.uniform_(0.5, 1.5)
    x = torch.randn(1, 3, 16, 16)
    mod = from_exported_program(torch.export.export(model, (x,)), keep_params_as_input=False)
    ex = tvm_tensil.build(mod, target="tensil", arch="pynqz1")
    report = tvm_tensil.last_report()
    assert [o["op"] for o in report.cpu_ops] == ["relax.nn.softmax"]
    out = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x.numpy()))
    y = out[0].numpy()  # torch-exported programs return a tuple
    ref = model(x).detach().numpy()
    assert np.max(np.abs(y - ref)) < 0.02
    assert ref[0, np.argmax(y)] >= ref.max() - 0.02  # the top class, up to near-ties
