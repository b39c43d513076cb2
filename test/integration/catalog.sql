-- A canonical description of everything relaybus owns in its schemas, relaybus (the API
-- and the tables) and relaybus_internal (helpers), one line per fact and sorted, so that two
-- databases can be compared with diff. Column order is left out on purpose (an upgrade
-- appends columns); everything else counts, descriptions (COMMENT ON) included.
WITH ns AS (SELECT oid FROM pg_namespace WHERE nspname IN ('relaybus', 'relaybus_internal'))
SELECT line FROM (
  SELECT format('table %s options=%s', c.oid::regclass, c.reloptions) AS line
    FROM pg_class c WHERE c.relnamespace IN (SELECT oid FROM ns) AND c.relkind = 'r'
  UNION ALL
  SELECT format('column %s.%s %s notnull=%s default=%s', c.oid::regclass, a.attname,
                format_type(a.atttypid, a.atttypmod), a.attnotnull,
                pg_get_expr(d.adbin, d.adrelid))
    FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
    LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
   WHERE c.relnamespace IN (SELECT oid FROM ns) AND c.relkind = 'r'
     AND a.attnum > 0 AND NOT a.attisdropped
  UNION ALL
  SELECT format('constraint %s.%s %s', c.oid::regclass, k.conname, pg_get_constraintdef(k.oid))
    FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid
   WHERE c.relnamespace IN (SELECT oid FROM ns)
  UNION ALL
  SELECT format('index %s options=%s', pg_get_indexdef(i.indexrelid), ic.reloptions)
    FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid JOIN pg_class ic ON ic.oid = i.indexrelid
   WHERE c.relnamespace IN (SELECT oid FROM ns)
  UNION ALL
  SELECT format('function %s returns %s language %s volatility %s strict %s secdef %s config %s acl %s body %s %s',
                p.oid::regprocedure, pg_get_function_result(p.oid), l.lanname, p.provolatile,
                p.proisstrict, p.prosecdef, p.proconfig, p.proacl, md5(p.prosrc), p.probin)
    FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
   WHERE p.pronamespace IN (SELECT oid FROM ns)
  UNION ALL
  -- tgenabled: 'A' fires always (also under session_replication_role = replica)
  SELECT format('trigger %s enabled=%s %s', t.tgname, t.tgenabled, pg_get_triggerdef(t.oid))
    FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
   WHERE c.relnamespace IN (SELECT oid FROM ns) AND NOT t.tgisinternal
  UNION ALL
  SELECT format('table-acl %s %s', c.oid::regclass, c.relacl)
    FROM pg_class c WHERE c.relnamespace IN (SELECT oid FROM ns) AND c.relkind IN ('r', 'S')
  UNION ALL
  SELECT format('schema %s owner=%s acl=%s', n.nspname, n.nspowner::regrole, n.nspacl)
    FROM pg_namespace n WHERE n.oid IN (SELECT oid FROM ns)
  UNION ALL
  -- what \d+, \df+ and \dn+ show: every description of an object in the two schemas (their
  -- columns and constraints included), of the schemas, of the extension and of the triggers
  -- on its tables
  SELECT format('comment %s: %s', pg_describe_object(d.classoid, d.objoid, d.objsubid),
                d.description)
    FROM pg_description d, pg_identify_object(d.classoid, d.objoid, d.objsubid) o
   WHERE o.schema IN ('relaybus', 'relaybus_internal')
      OR (o.type = 'schema' AND o.identity IN ('relaybus', 'relaybus_internal'))
      OR (o.type = 'extension' AND o.identity = 'relaybus')
      OR (o.type = 'trigger' AND o.identity LIKE '% on relaybus.%')
  UNION ALL
  SELECT format('dumped-with-data %s filter=%s', c.oid::regclass, x.condition)
    FROM pg_extension e, unnest(e.extconfig, e.extcondition) AS x(config, condition)
    JOIN pg_class c ON c.oid = x.config
   WHERE e.extname = 'relaybus'
  UNION ALL
  SELECT format('member %s', pg_describe_object(d.classid, d.objid, d.objsubid))
    FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid
   WHERE e.extname = 'relaybus' AND d.deptype = 'e'
) facts ORDER BY line COLLATE "C";
