--
-- What CREATE EXTENSION inbox installs
--
CREATE EXTENSION inbox;

-- The table, its key, limits and identity.
\d inbox

-- Registered for pg_dump, so markers survive a dump and restore.
SELECT extconfig::regclass[] AS config_tables, extcondition
FROM pg_extension WHERE extname = 'inbox';

-- Functions: not STRICT (a NULL argument is an error, never a NULL answer),
-- volatile, parallel unsafe.
SELECT p.oid::regprocedure AS function, provolatile, proisstrict, proparallel,
	   prosecdef, proconfig
FROM pg_proc p JOIN pg_depend d ON d.objid = p.oid AND d.classid = 'pg_proc'::regclass
WHERE d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'inbox')
  AND d.deptype = 'e'
ORDER BY p.oid::regprocedure::text;

-- Nothing is granted to PUBLIC.
SELECT p.oid::regprocedure AS function,
	   has_function_privilege('public', p.oid, 'EXECUTE') AS public_execute
FROM pg_proc p WHERE p.proname LIKE 'inbox%' ORDER BY p.oid::regprocedure::text;
SELECT has_table_privilege('public', 'inbox', 'SELECT') AS public_select,
	   has_table_privilege('public', 'inbox', 'INSERT') AS public_insert;

-- Every member object carries a comment.  Not the types PostgreSQL makes
-- along with a table or type (its row type, array types), which 18 records
-- as members too and which have nothing to say of their own.
SELECT pg_describe_object(classid, objid, 0) AS uncommented
FROM pg_depend d
WHERE refobjid = (SELECT oid FROM pg_extension WHERE extname = 'inbox')
  AND deptype = 'e'
  AND obj_description(objid, classid::regclass::name) IS NULL
  AND NOT EXISTS (SELECT FROM pg_catalog.pg_type t
				  WHERE d.classid = 'pg_catalog.pg_type'::regclass
					AND t.oid = d.objid
					AND (t.typrelid <> 0 OR
						 EXISTS (SELECT FROM pg_catalog.pg_type e
								 WHERE e.typarray = t.oid)));

-- The table itself has no CHECK constraints (they cost every insert); the
-- functions enforce the key limits (sql/claim_errors.sql).
SELECT count(*) AS check_constraints FROM pg_constraint
WHERE conrelid = 'inbox'::regclass AND contype = 'c';

TRUNCATE inbox;
DROP EXTENSION inbox;
