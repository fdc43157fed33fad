"""Thin routes: parse, call one service, map the result."""
