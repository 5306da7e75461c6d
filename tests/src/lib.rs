//! Harness for whole-system tests.
