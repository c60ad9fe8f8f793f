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


def test_trained_digits_cnn_keeps_its_accuracy():
    """A CNN trained here on scikit-learn's digits (8x8 images) loses at most one point of
    top-1 accuracy on its test split on the TCU (FP16BP8)."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    torch.manual_seed(0)
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32).reshape(-1, 1, 8, 8)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.3, random_state=0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(1, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.BatchNorm2d(32), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(32, 10))
    opt = torch.optim.Adam(net.parameters(), lr=0.01)
    xt, yt = torch.from_numpy(x_train), torch.from_numpy(y_train)
    for _ in range(30):
        for i in range(0, len(xt), 64):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(net(xt[i:i + 64]), yt[i:i + 64]).backward()
            opt.step()
    net.eval()
    sample = torch.from_numpy(x_test)
    float_pred = net(sample).argmax(1).numpy()
    mod = from_exported_program(torch.export.export(net, (sample,)), keep_params_as_input=False)
    ex = tvm_tensil.build(mod, target="tensil", arch="pynqz1")
    assert tvm_tensil.last_report().cpu_ops == []  # everything on the TCU
    out = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x_test))
    tcu_pred = out[0].numpy().argmax(1)
    float_acc, tcu_acc = np.mean(float_pred == y_test), np.mean(tcu_pred == y_test)
    assert float_acc > 0.9
    assert tcu_acc >= float_acc - 0.01, (float_acc, tcu_acc)
