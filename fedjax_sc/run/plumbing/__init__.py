"""Beneath the application, knowing nothing of it: several processes (:mod:`.processes`),
experiment tracking (:mod:`.tracking`), flag spelling (:mod:`.flags`) and the figures'
matplotlib plumbing with the run's own figure (:mod:`.figures`)."""
