"""The decisions made from the runs: the ranking and the seed variance it rests on (`ranking`),
the other metrics' trends (`trends`) and the race across seeds (`race`: its looks, boundary and
record)."""
