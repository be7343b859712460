"""Tests on the Firestore, Pub/Sub and Cloud Storage emulators."""
