// Placeholder: filled in by the calibration work (issue #4 point 6).
