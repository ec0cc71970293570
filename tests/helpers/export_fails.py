"""export.py's main(argv) with the ONNX writer failing as a converter does on a model it cannot hold: run in forked
ranks (tests/ranks.py target="helpers.export_fails:main"), only the main process writes, and every process must stop
with its line instead of waiting for the file."""

import export
from utils.export import formats
from utils.run.trained import RunError


def failing_write(self, graph, example, path, metadata, calibration=None):
    raise RunError("ONNX cannot hold this model: a layer it has no translation for")


def main(argv):
    formats.Onnx.write = failing_write
    return export.main(argv)
