"""GPU kernel traces (nsys SQLite, Kineto JSON): readers and the trace analyses."""
