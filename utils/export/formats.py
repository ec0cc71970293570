"""The formats export.py writes, one class each, one protocol: `write(graph, example, path, metadata, calibration)`
puts the run's eval graph (graph.py's EvalGraph: uint8 pixels in, the run's outputs out) in a file, and
`load(path)` gives a Runner that executes that file with its own runtime, as a deployment would (numpy in, numpy
out). Each format is a well-kept library's: torch's ONNX exporter, ONNX Runtime's float16 converter and static
quantization, OpenVINO with NNCF's post-training quantization, AOTInductor.

Not torch.ao.quantization: it is deprecated (pytorch#160095); the runtimes' own quantizers are what deployments use.
"""

import json
import os
import re
import shutil
import tempfile
from pathlib import Path

import numpy as np
import torch

from utils.export.graph import input_shape
from utils.run.trained import RunError

EXPORT_REQUIREMENTS = "requirements-export.txt"


def needs(module, why):
    """`module` imported, or a RunError naming the requirements file that installs it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise RunError(f"{why} needs {module.split('.')[0]}, not installed here: pip install -r "
                       f"{EXPORT_REQUIREMENTS}") from None


class Runner:
    """An exported file, executed by its runtime: `runner(pixels)` -> the graph's output, both numpy."""

    def __call__(self, pixels):
        raise NotImplementedError


class ExportFormat:
    name = ""  # --format's value
    suffix = ""  # the file's
    precision = "fp32"  # of its arithmetic: what --min_agreement defaults by
    runtime = ""  # the module that executes it
    quantized = False  # calibrated on training samples

    def write(self, graph, example, path, metadata, calibration=None):
        """`graph` (an EvalGraph, eval mode) as this format at `path`, its metadata (str -> str) in the format's own
        place; `example`: a batch of its input; `calibration`: sample.py's Calibration (quantized formats)."""
        raise NotImplementedError

    def load(self, path):
        """A Runner of the file at `path`."""
        raise NotImplementedError

    def metadata(self, path):
        """The metadata the file at `path` carries (str -> str)."""
        raise NotImplementedError

    def files(self, path):
        """Every file the export at `path` is made of (OpenVINO: the .xml and its .bin)."""
        return [Path(path)]

    def available(self):
        """None, or why this machine cannot write or run the format (one line)."""
        needs(self.runtime, f"--format {self.name}")
        return None


# ONNX ------------------------------------------------------------------------------------------------------------


def onnx_program(graph, example, output_name):
    """torch's dynamo exporter of `graph`, the batch dynamic; a RunError naming what it could not translate."""
    batch = torch.export.Dim("batch", min=1)
    try:
        return torch.onnx.export(graph, (example,), dynamo=True, dynamic_shapes={"pixels": {0: batch}},
                                 input_names=["pixels"], output_names=[output_name], verbose=False)
    except ImportError as e:
        raise RunError(f"ONNX export: {e} (pip install -r requirements.txt)") from None
    except Exception as e:  # torch.onnx.errors / torch._dynamo errors: the operator or layer it stopped at
        raise RunError(f"ONNX cannot hold this model: {one_line(e)}") from None


def one_line(error):
    """An exporter's refusal in one line: its root cause's first line (torch.onnx wraps torch.export's), with the place
    in the model's code it names ("File ..., line N, in forward"), shortened."""
    while error.__cause__ is not None:
        error = error.__cause__
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(error))  # the exporter's terminal colours
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    places = [line for line in lines if re.match(r'File ".*", line [0-9]+, in ', line)]
    first = (lines[0] if lines else type(error).__name__)[:300]
    return f"{first} (at {places[-1]})" if places else first


def with_onnx_metadata(model, metadata):
    """The onnx ModelProto `model` with `metadata` as its metadata_props (replacing those keys)."""
    kept = [p for p in model.metadata_props if p.key not in metadata]
    del model.metadata_props[:]
    model.metadata_props.extend(kept)
    for key, value in metadata.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    return model


class OnnxRunner(Runner):
    def __init__(self, path):
        ort = needs("onnxruntime", "running an ONNX file")
        self.session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        self.input = self.session.get_inputs()[0].name

    def __call__(self, pixels):
        return self.session.run(None, {self.input: pixels})[0]


class Onnx(ExportFormat):
    name, suffix, runtime = "onnx", ".onnx", "onnxruntime"

    def write(self, graph, example, path, metadata, calibration=None):
        import onnx

        model = onnx_program(graph, example, metadata["output"]).model_proto
        onnx.save(with_onnx_metadata(self.converted(model, path, calibration), metadata), str(path))

    def converted(self, model, path, calibration):
        return model

    def load(self, path):
        return OnnxRunner(path)

    def metadata(self, path):
        import onnx

        return {p.key: p.value for p in onnx.load(str(path), load_external_data=False).metadata_props}


class OnnxFp16(Onnx):
    """Weights and arithmetic in float16, the input (uint8 or float32 bands) and output kept as they are: ONNX
    Runtime's converter (onnxruntime.transformers.float16)."""
    name, precision = "onnx_fp16", "fp16"

    def converted(self, model, path, calibration):
        needs("onnxruntime", f"--format {self.name}")
        from onnxruntime.transformers.float16 import convert_float_to_float16

        return convert_float_to_float16(model, keep_io_types=True)


# What ONNX Runtime quantizes: the operations that hold the arithmetic. Its default list also quantizes the additions,
# normalisations and softmax of a ViT, which cost a timm ViT-Tiny 4 points of agreement on the digits (0.961 against
# 0.997 with these alone).
QUANTIZED_OPS = ["Conv", "MatMul", "Gemm"]


class OnnxInt8(Onnx):
    """Static post-training quantization by ONNX Runtime: QDQ, int8 weights per channel, uint8 activations (the pair
    its x86 kernels run fast: int8 activations ran resnet18 10x slower here), their ranges from the calibration
    batches (min-max), after its pre-processing (shape inference, graph optimisation)."""
    name, precision, quantized = "onnx_int8", "int8", True

    def converted(self, model, path, calibration):
        import onnx

        needs("onnxruntime", f"--format {self.name}")
        from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
        from onnxruntime.quantization.shape_inference import quant_pre_process

        class Batches(CalibrationDataReader):
            def __init__(self):
                self.batches = iter(calibration.batches)

            def get_next(self):
                batch = next(self.batches, None)
                return None if batch is None else {"pixels": batch}

        with tempfile.TemporaryDirectory(dir=Path(path).parent) as work:
            plain, prepared, quantized = (Path(work) / name for name in ("plain.onnx", "pre.onnx", "int8.onnx"))
            onnx.save(model, str(plain))
            quant_pre_process(str(plain), str(prepared))
            quantize_static(str(prepared), str(quantized), Batches(), quant_format=QuantFormat.QDQ, per_channel=True,
                            activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                            op_types_to_quantize=QUANTIZED_OPS)
            return onnx.load(str(quantized))


# OpenVINO --------------------------------------------------------------------------------------------------------


class OpenVinoRunner(Runner):
    def __init__(self, path, precision):
        ov = needs("openvino", "running an OpenVINO file")
        core = ov.Core()
        # Its CPU plugin computes in bfloat16 by default where the CPU has it: an fp32 model is asked for f32 (an int8
        # one runs as the plugin chooses, its float parts in bfloat16 there: what a deployment gets by default)
        hint = {"INFERENCE_PRECISION_HINT": "f32"} if precision == "fp32" else {}
        self.compiled = core.compile_model(core.read_model(str(path)), "CPU", hint)

    def __call__(self, pixels):
        return self.compiled(pixels)[0]


class OpenVino(ExportFormat):
    """OpenVINO IR (.xml and its .bin), converted from the PyTorch graph (openvino.convert_model), weights in fp32."""
    name, suffix, runtime = "openvino", ".xml", "openvino"

    def write(self, graph, example, path, metadata, calibration=None):
        ov = needs("openvino", f"--format {self.name}")
        try:
            model = ov.convert_model(graph, example_input=example, input=[([-1, *example.shape[1:]],
                                                                           self.element(ov, example))])
        except Exception as e:  # OpenVINO's frontend names the operation it has no conversion for
            raise RunError(f"OpenVINO cannot hold this model: {one_line(e)}") from None
        model.outputs[0].get_tensor().set_names({metadata["output"]})
        model = self.converted(model, calibration)
        for key, value in metadata.items():
            model.set_rt_info(value, ["model_info", key])
        ov.save_model(model, str(path), compress_to_fp16=False)

    @staticmethod
    def element(ov, example):
        return ov.Type.u8 if example.dtype == torch.uint8 else ov.Type.f32

    def converted(self, model, calibration):
        return model

    def load(self, path):
        return OpenVinoRunner(path, self.precision)

    def metadata(self, path):
        ov = needs("openvino", "reading an OpenVINO file")
        model = ov.Core().read_model(str(path))
        info = model.get_rt_info()["model_info"] if model.has_rt_info(["model_info"]) else {}
        return {key: model.get_rt_info(["model_info", key]).astype(str) for key in info}

    def files(self, path):
        return [Path(path), Path(path).with_suffix(".bin")]


class OpenVinoInt8(OpenVino):
    """NNCF's post-training quantization of the IR (its defaults: int8 weights per channel, activations from the
    calibration batches, fast bias correction); with --accuracy_control, NNCF's accuracy-aware mode, which keeps in
    fp32 the layers that cost the most, until the score on held-out training samples drops by at most the given
    points."""
    name, precision, quantized = "openvino_int8", "int8", True

    def converted(self, model, calibration):
        nncf = needs("nncf", f"--format {self.name}")
        data = nncf.Dataset(list(calibration.batches))
        size = len(calibration.batches)  # NNCF counts the dataset's items: batches
        held_out = calibration.held_out
        if held_out is None:
            return nncf.quantize(model, data, subset_size=size, model_type=self.model_type(nncf, model))

        def validate(compiled, items):  # NNCF gives the held-out dataset's items as they are: (pixels, labels)
            return held_out.score(np.concatenate([compiled(pixels)[0] for pixels, _ in items]))

        return nncf.quantize_with_accuracy_control(model, data, nncf.Dataset(held_out.batches, lambda item: item[0]),
                                                   validation_fn=validate, max_drop=held_out.max_drop,
                                                   subset_size=size, model_type=self.model_type(nncf, model))

    @staticmethod
    def model_type(nncf, model):
        """NNCF's transformer scheme where the graph has attention (a softmax inside it): it keeps the operations that
        int8 hurts most there in float (a ViT's agreement on the digits went from 0.972 to 1.000 with it)."""
        ops = {op.get_type_name() for op in model.get_ops()}
        return nncf.ModelType.TRANSFORMER if ops & {"Softmax", "ScaledDotProductAttention"} else None


# A compiled PyTorch package --------------------------------------------------------------------------------------


class Pt2Runner(Runner):
    def __init__(self, path):
        self.package = torch._inductor.aoti_load_package(str(path))

    def __call__(self, pixels):
        with torch.no_grad():
            return self.package(torch.from_numpy(pixels)).numpy()


class Pt2(ExportFormat):
    """torch.export's program compiled ahead of time by AOTInductor into a .pt2 package: a shared library and the
    weights, loaded with torch._inductor.aoti_load_package (torch alone, none of this project); a C++ compiler is
    needed to write it, not to run it. Frozen (the weights constants, prepacked for oneDNN's convolutions): resnet18
    ran twice as fast at batch 1 here than without."""
    name, suffix, runtime = "pt2", ".pt2", "torch"

    def write(self, graph, example, path, metadata, calibration=None):
        batch = torch.export.Dim("batch", min=1, max=4096)
        try:
            program = torch.export.export(graph, (example,), dynamic_shapes={"pixels": {0: batch}})
        except Exception as e:
            raise RunError(f"torch.export cannot hold this model: {one_line(e)}") from None
        with tempfile.TemporaryDirectory(dir=Path(path).parent) as work:
            package = Path(work) / "model.pt2"
            torch._inductor.aoti_compile_and_package(program, package_path=str(package),
                                                     inductor_configs={"aot_inductor.metadata": metadata,
                                                                       "freezing": True})
            shutil.move(package, path)

    def available(self):
        if shutil.which(os.environ.get("CXX", "c++")) is None and shutil.which("g++") is None:
            return "--format pt2: AOTInductor compiles C++, and this machine has no C++ compiler (install g++)"
        return None

    def load(self, path):
        return Pt2Runner(path)

    def metadata(self, path):
        found = torch._inductor.aoti_load_package(str(path)).get_metadata()
        return {key: value for key, value in found.items() if not key.startswith("AOTI_")}


class TensorRt(ExportFormat):
    """TensorRT engines need an NVIDIA GPU; this version refuses the format in one line elsewhere."""
    name, suffix, runtime, precision = "tensorrt", ".engine", "tensorrt", "fp16"

    def available(self):
        if not torch.cuda.is_available():
            return "--format tensorrt: TensorRT builds engines for an NVIDIA GPU, and this machine has none (export " \
                   "onnx here and build the engine on the GPU machine: trtexec --onnx=FILE --fp16)"
        return "--format tensorrt: not built by this version yet (export onnx and build the engine with trtexec " \
               "--onnx=FILE --fp16)"


FORMATS = {f.name: f for f in (Onnx(), OnnxFp16(), OnnxInt8(), OpenVino(), OpenVinoInt8(), Pt2(), TensorRt())}
# What the share of agreeing samples must reach by default: the arithmetic of each precision
MIN_AGREEMENT = {"fp32": 0.999, "fp16": 0.995, "int8": 0.98}


def format_of(path):
    """The format of an exported file: its family by the suffix, then the format it recorded (its metadata)."""
    family = next((f for f in FORMATS.values() if f.suffix == Path(path).suffix and f.precision == "fp32"), None)
    if family is None:
        raise RunError(f"{path}: not a file export.py writes (.onnx, .xml, .pt2)")
    if not Path(path).is_file():
        raise RunError(f"{path}: no such file")
    return FORMATS.get(family.metadata(path).get("format"), family)


def export_metadata(fmt, run, task, temperature):
    """What a user of the exported file needs without this project, as strings (JSON where not a plain value): the
    run's `task` says its output and whether its classes are decided at thresholds (the run's --threshold each)."""
    inp = run.input
    mean, std = inp.mean_std or ((0.0,) * inp.channels, (1.0,) * inp.channels)  # synthetic input: not normalised
    full_scale = inp.pixel_max if inp.pixel_max is not None else 255
    return {"format": fmt.name, "precision": fmt.precision, "model": run.model, "classes": json.dumps(run.classes),
            "label_kind": run.label_kind, "output": task.exported, "input": "pixels",
            "input_shape": json.dumps(["N", *input_shape(inp)]),
            "input_dtype": "uint8" if inp.pixel_max is None else "float32", "bands": str(inp.channels),
            "pixel_max": json.dumps(full_scale), "resize_shorter_side": str(inp.val_resize_size),
            "crop_size": str(inp.val_crop_size), "interpolation": inp.interpolation,
            "mean": json.dumps(list(mean)), "std": json.dumps(list(std)),
            "normalisation": "inside the graph: (pixels / pixel_max - mean) / std",
            "temperature": json.dumps(temperature), "thresholds": json.dumps(thresholds_of(run, task))}


def thresholds_of(run, task):
    """Each class's threshold, where the run's kind of labels decides its classes at thresholds; else None."""
    return [run.threshold] * len(run.classes) if task.thresholded else None
