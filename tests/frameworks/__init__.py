"""Tests that train with a real ML framework (TensorFlow, torch, Lightning, Hugging Face, Ray)."""
