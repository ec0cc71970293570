"""Bad input is one kind of error: every subsystem's error class is a UserError, which main() reports in one line."""

import pytest

from utils.core.errors import ConfigError
from utils.core.errors import UserError, report
from utils.data.errors import DataError
from utils.evaluation.metrics import MetricError
from utils.inference import RunError
from utils.models.errors import ModelError
from utils.reporting.model_folder import PushError
from utils.run.teacher import TeacherError
from utils.training.run_folder import FolderError


@pytest.mark.parametrize("error, builtin", [(DataError, ValueError), (ModelError, ValueError),
                                            (ConfigError, ValueError),
                                            (RunError, ValueError), (PushError, RuntimeError), (FolderError, Exception),
                                            (MetricError, Exception), (TeacherError, ValueError)])
def test_every_subsystems_error_is_a_user_error_and_keeps_its_builtin_base(error, builtin):
    assert issubclass(error, UserError) and issubclass(error, builtin)


def test_report_is_one_line_on_stderr_and_exit_2(capsys):
    with pytest.raises(SystemExit) as stopped:
        report("train_classification.py", "dataset: no such folder; pass --data_dir")
    out = capsys.readouterr()
    assert stopped.value.code == 2 and out.out == ""
    assert out.err == "train_classification.py: error: dataset: no such folder; pass --data_dir\n"


def test_a_user_error_from_any_subsystem_stops_main_in_one_line(tmp_path, capsys, monkeypatch):
    """main() catches the base class: an error class it was never told about still exits 2 in one line."""
    from conftest import TINY, main_fails

    from utils.data.sources.synthetic import Synthetic

    class NewSubsystemError(UserError):
        pass

    def refuse(*args, **kwargs):
        raise NewSubsystemError("widget: cannot frobnicate; pass --no_widget")

    monkeypatch.setattr(Synthetic, "datasets", refuse)  # TINY's source
    code, err = main_fails([*TINY, "--output_dir", tmp_path / "run"], capsys)
    assert code == 2 and err.strip().splitlines()[-1] == \
        "train_classification.py: error: widget: cannot frobnicate; pass --no_widget"
