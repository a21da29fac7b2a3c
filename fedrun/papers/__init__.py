"""Everything that knows one of the five papers: reproduce targets, table layouts, captions, method order,
published cells, the scorecard.
"""
