"""What the analysis shows and writes: the per-config curves over seeds (`curves`), figures
(`plots`), `report.md` (`report`), promoted configs (`promote`), and the live view of a running
sweep (`progress`, `monitor`)."""
