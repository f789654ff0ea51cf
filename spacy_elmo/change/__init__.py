"""Semantic change between two corpora: which words are used differently, measured (APD, APD-c,
PRT, JSD of jointly induced senses, MAHAL, with bootstrap intervals and SemEval-2020 Task 1's binary
call) and explained sense by sense; a synthetic benchmark with known truth from SemCor."""

from .detect import DEFAULT_MEASURE, ChangeReport, ChangeSettings, SenseChange, WordChange, compare_samples, detect_change
from .measures import MEASURES, BinaryRule, apd, apd_c, bootstrap, jsd, mahal, prt
from .report import explain, report_json, report_tsv, write_report

__all__ = [
    "DEFAULT_MEASURE",
    "MEASURES",
    "BinaryRule",
    "ChangeReport",
    "ChangeSettings",
    "SenseChange",
    "WordChange",
    "apd",
    "apd_c",
    "bootstrap",
    "compare_samples",
    "detect_change",
    "explain",
    "jsd",
    "mahal",
    "prt",
    "report_json",
    "report_tsv",
    "write_report",
]
