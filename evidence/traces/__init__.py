"""GPU kernel traces (nsys SQLite, Kineto JSON): readers and the trace analyses.

model     the kernel table (numpy columns), steps, ranges, Trace, TraceError
nsys      Nsight Systems SQLite export reader
kineto    PyTorch profiler (Kineto) Chrome-trace JSON reader
load      format detection by content, load_trace
analyses  one module per analysis and the registry that runs them (analyze_trace)
profile   a run's profile/ folder -> per-point analyses
"""
