"""semantic"""
