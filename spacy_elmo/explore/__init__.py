"""The explore page: one HTML file that shows a word's induced senses, its occurrences on a map
and each one's nearest occurrences."""
