"""Beneath the application, knowing nothing of it: several processes (:mod:`.processes`),
experiment tracking (:mod:`.tracking`), flag spelling (:mod:`.flags`), reading a run's JSON
files (:mod:`.jsonfile`), the figures' matplotlib plumbing with the run's own figure
(:mod:`.figures`) and the upload flags made one upload transform (:mod:`.uploads`: their
defaults, checks and chain)."""
