"""Beneath the application, knowing nothing of it: several processes (:mod:`.processes`),
experiment tracking (:mod:`.tracking`) and flag spelling (:mod:`.flags`)."""
