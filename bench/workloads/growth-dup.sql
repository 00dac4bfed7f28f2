-- a duplicate of one of the :size markers loaded before the run
\set g random(1, :size)
SELECT inbox_claim(md5('old-' || :g), 'credit');
