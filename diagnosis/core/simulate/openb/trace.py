"""Read the Alibaba OpenB trace (cluster-trace-gpu-v2023) into typed, validated tables.

Node lists: ``sn,cpu_milli,memory_mib,gpu,model``. Pod lists:
``name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec,qos,pod_phase,creation_time,...]``.
Every problem is reported as a :class:`TraceFormatError` naming the file, line and column.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np

MILLI_PER_GPU = 1000
NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")

_Parsed = TypeVar("_Parsed")


class TraceFormatError(ValueError):
    """A trace file is missing or does not hold what its format promises."""

    def __init__(
        self, path: Path | str, message: str, *, line: int | None = None, column: str | None = None
    ) -> None:
        where = str(path)
        if line is not None:
            where += f", line {line}"
        if column is not None:
            where += f", column {column!r}"
        super().__init__(f"{where}: {message}")
        self.path = str(path)
        self.line = line
        self.column = column


@dataclass(frozen=True)
class NodeTable:
    """The cluster's nodes. ``gpu_model`` is "" for a node without GPUs."""

    names: tuple[str, ...]
    cpu_milli: np.ndarray
    memory_mib: np.ndarray
    gpu_count: np.ndarray
    gpu_model: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.names)

    @property
    def gpu_capacity_milli(self) -> int:
        return int(self.gpu_count.sum()) * MILLI_PER_GPU


@dataclass(frozen=True)
class PodTable:
    """The workload. ``gpu_milli`` is per GPU (1000 = a whole GPU, 0 for CPU-only pods);
    ``gpu_spec`` is the tuple of allowed GPU models, empty when any model will do."""

    names: tuple[str, ...]
    cpu_milli: np.ndarray
    memory_mib: np.ndarray
    num_gpu: np.ndarray
    gpu_milli: np.ndarray
    gpu_spec: tuple[tuple[str, ...], ...]
    creation_time: np.ndarray | None
    # seconds, NaN where the trace has none (a pod never scheduled); read when the columns are
    # there, for the start-time backtest's replay over time (docs/forecasts.md)
    deletion_time: np.ndarray | None = None
    scheduled_time: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.names)

    @property
    def total_gpu_milli(self) -> np.ndarray:
        return self.num_gpu * self.gpu_milli


def read_nodes(path: Path | str) -> NodeTable:
    """Read an OpenB node list (``openb_node_list_*.csv``)."""
    names: list[str] = []
    cpu: list[int] = []
    memory: list[int] = []
    gpus: list[int] = []
    models: list[str] = []
    for line, row in _rows(path, NODE_COLUMNS):
        field = _FieldReader(path, line, row)
        names.append(field.text("sn", required=True))
        cpu.append(field.integer("cpu_milli", minimum=0))
        memory.append(field.integer("memory_mib", minimum=0))
        gpus.append(field.integer("gpu", minimum=0, maximum=64))
        models.append(field.text("model"))
    if not names:
        raise TraceFormatError(path, "no nodes in the file")
    return NodeTable(
        names=tuple(names),
        cpu_milli=np.array(cpu, dtype=np.int64),
        memory_mib=np.array(memory, dtype=np.int64),
        gpu_count=np.array(gpus, dtype=np.int64),
        gpu_model=tuple(models),
    )


def read_pods(path: Path | str) -> PodTable:
    """Read an OpenB pod list (``openb_pod_list_*.csv``); pods are kept in file order."""
    names: list[str] = []
    cpu: list[int] = []
    memory: list[int] = []
    num_gpu: list[int] = []
    gpu_milli: list[int] = []
    specs: list[tuple[str, ...]] = []
    created: list[float] = []
    later: dict[str, list[float]] = {"deletion_time": [], "scheduled_time": []}
    for line, row in _rows(path, POD_COLUMNS):
        field = _FieldReader(path, line, row)
        names.append(field.text("name", required=True))
        cpu.append(field.integer("cpu_milli", minimum=0))
        memory.append(field.integer("memory_mib", minimum=0))
        gpus = field.integer("num_gpu", minimum=0, maximum=64)
        milli = field.integer("gpu_milli", minimum=0, maximum=MILLI_PER_GPU)
        if gpus == 0:
            milli = 0
        elif milli == 0:
            raise field.error("gpu_milli", "must be 1..1000 when num_gpu > 0")
        elif gpus > 1 and milli < MILLI_PER_GPU:
            raise field.error("gpu_milli", "a pod asking for several GPUs must take them whole")
        num_gpu.append(gpus)
        gpu_milli.append(milli)
        spec = field.text("gpu_spec")
        specs.append(tuple(m for m in spec.split("|") if m) if gpus else ())
        if "creation_time" in row:
            created.append(field.number("creation_time"))
        for column, values in later.items():
            if column in row:
                values.append(field.number(column) if field.text(column) else math.nan)
    if not names:
        raise TraceFormatError(path, "no pods in the file")
    return PodTable(
        names=tuple(names),
        cpu_milli=np.array(cpu, dtype=np.int64),
        memory_mib=np.array(memory, dtype=np.int64),
        num_gpu=np.array(num_gpu, dtype=np.int64),
        gpu_milli=np.array(gpu_milli, dtype=np.int64),
        gpu_spec=tuple(specs),
        creation_time=np.array(created, dtype=np.float64) if created else None,
        deletion_time=_times(later["deletion_time"], len(names)),
        scheduled_time=_times(later["scheduled_time"], len(names)),
    )


def _times(values: list[float], count: int) -> np.ndarray | None:
    return np.array(values, dtype=np.float64) if len(values) == count else None


def _rows(path: Path | str, required: Iterable[str]) -> Iterable[tuple[int, dict[str, str]]]:
    try:
        handle = open(path, newline="", encoding="utf-8-sig")  # noqa: SIM115 (closed below)
    except OSError as exc:
        raise TraceFormatError(path, f"cannot open: {exc.strerror or exc}") from exc
    with handle:
        reader = csv.reader(handle)
        try:
            header = next(reader, None)
            if header is None:
                raise TraceFormatError(path, "empty file, expected a CSV header", line=1)
            header = [name.strip() for name in header]
            missing = [name for name in required if name not in header]
            if missing:
                raise TraceFormatError(
                    path, f"header lacks column(s) {', '.join(missing)}", line=1, column=missing[0]
                )
            for values in reader:
                if not values or all(not v.strip() for v in values):
                    continue
                if len(values) != len(header):
                    raise TraceFormatError(
                        path,
                        f"expected {len(header)} fields, found {len(values)}",
                        line=reader.line_num,
                    )
                yield reader.line_num, dict(zip(header, values, strict=True))
        except UnicodeDecodeError as exc:
            raise TraceFormatError(path, f"not UTF-8 text ({exc.reason})") from exc
        except csv.Error as exc:
            raise TraceFormatError(path, f"malformed CSV: {exc}", line=reader.line_num) from exc


class _FieldReader:
    def __init__(self, path: Path | str, line: int, row: dict[str, str]) -> None:
        self.path = path
        self.line = line
        self.row = row

    def error(self, column: str, message: str) -> TraceFormatError:
        return TraceFormatError(self.path, message, line=self.line, column=column)

    def text(self, column: str, *, required: bool = False) -> str:
        value = self.row.get(column, "").strip()
        if required and not value:
            raise self.error(column, "empty value")
        return value

    def number(self, column: str) -> float:
        return self._parse(column, float, "a number")

    def integer(self, column: str, *, minimum: int, maximum: int | None = None) -> int:
        value = self._parse(column, _parse_integer, "an integer")
        if value < minimum or (maximum is not None and value > maximum):
            bound = f"{minimum}..{maximum}" if maximum is not None else f">= {minimum}"
            raise self.error(column, f"{value} is out of range ({bound})")
        return value

    def _parse(self, column: str, parse: Callable[[str], _Parsed], kind: str) -> _Parsed:
        raw = self.text(column)
        try:
            return parse(raw)
        except ValueError:
            raise self.error(column, f"expected {kind}, found {raw!r}") from None


def _parse_integer(raw: str) -> int:
    try:
        return int(raw)
    except ValueError:
        value = float(raw)
        if not value.is_integer():
            raise
        return int(value)
