-- Row-level security: every row is seen and written only by a transaction that named its
-- tenant — set_config('colibri.tenants', 'a,b', true), or '*' for every tenant, at the start of
-- each transaction, never for a connection. FORCE: the tables' owner is held to it too (only a
-- superuser, or a role with BYPASSRLS, is not; `colibri hive grant` makes a role that is).
-- Schedules and their fire records carry their tenant as a column now.
ALTER TABLE schedules ADD COLUMN tenant TEXT COLLATE "C";
UPDATE schedules SET tenant = COALESCE(doc::jsonb -> 'task' ->> 'tenant', 'default');
ALTER TABLE schedules ALTER COLUMN tenant SET NOT NULL;
ALTER TABLE schedule_fires ADD COLUMN tenant TEXT COLLATE "C";
UPDATE schedule_fires f SET tenant = COALESCE(
    (SELECT s.tenant FROM schedules s WHERE s.name = f.schedule), 'default');
ALTER TABLE schedule_fires ALTER COLUMN tenant SET NOT NULL;
-- Whether the transaction named tenant t (inlined by the planner: one expression per row).
CREATE FUNCTION colibri_sees(t TEXT) RETURNS BOOLEAN LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT current_setting('colibri.tenants', true) = '*'
        OR t = ANY (string_to_array(current_setting('colibri.tenants', true), ','))
$$;
-- Whether it named any: the rows of the whole board (the claim key, the skills) need that much.
CREATE FUNCTION colibri_named() RETURNS BOOLEAN LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT COALESCE(current_setting('colibri.tenants', true), '') <> ''
$$;
-- The ledger's highest seq over every tenant's rows: a batch numbers its rows after it, whatever
-- tenants its transaction names (the seq is the whole board's, gap-free).
CREATE FUNCTION colibri_ledger_top() RETURNS BIGINT LANGUAGE sql STABLE
    SET colibri.tenants = '*' AS $$
    SELECT COALESCE(MAX(seq), 0) FROM ledger
$$;
ALTER TABLE tasks ENABLE ROW LEVEL SECURITY;
ALTER TABLE tasks FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON tasks USING (colibri_sees(tenant)) WITH CHECK (colibri_sees(tenant));
ALTER TABLE ledger ENABLE ROW LEVEL SECURITY;
ALTER TABLE ledger FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON ledger USING (colibri_sees(tenant)) WITH CHECK (colibri_sees(tenant));
ALTER TABLE agents ENABLE ROW LEVEL SECURITY;
ALTER TABLE agents FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON agents USING (colibri_sees(tenant)) WITH CHECK (colibri_sees(tenant));
ALTER TABLE tokens ENABLE ROW LEVEL SECURITY;
ALTER TABLE tokens FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON tokens USING (colibri_sees(tenant)) WITH CHECK (colibri_sees(tenant));
ALTER TABLE schedules ENABLE ROW LEVEL SECURITY;
ALTER TABLE schedules FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON schedules
    USING (colibri_sees(tenant)) WITH CHECK (colibri_sees(tenant));
ALTER TABLE schedule_fires ENABLE ROW LEVEL SECURITY;
ALTER TABLE schedule_fires FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON schedule_fires
    USING (colibri_sees(tenant)) WITH CHECK (colibri_sees(tenant));
ALTER TABLE tenants ENABLE ROW LEVEL SECURITY;
ALTER TABLE tenants FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON tenants USING (colibri_sees(name)) WITH CHECK (colibri_sees(name));
ALTER TABLE meta ENABLE ROW LEVEL SECURITY;
ALTER TABLE meta FORCE ROW LEVEL SECURITY;
CREATE POLICY board_rows ON meta USING (colibri_named()) WITH CHECK (colibri_named());
ALTER TABLE skills ENABLE ROW LEVEL SECURITY;
ALTER TABLE skills FORCE ROW LEVEL SECURITY;
CREATE POLICY board_rows ON skills USING (colibri_named()) WITH CHECK (colibri_named());
-- Who serves, which daemons there are, the schema's version: no tenant's data, and read before
-- any tenant is known (taking the lease, `colibri hive list`, opening the board).
ALTER TABLE leases ENABLE ROW LEVEL SECURITY;
ALTER TABLE leases FORCE ROW LEVEL SECURITY;
CREATE POLICY any_rows ON leases USING (true) WITH CHECK (true);
ALTER TABLE hives ENABLE ROW LEVEL SECURITY;
ALTER TABLE hives FORCE ROW LEVEL SECURITY;
CREATE POLICY any_rows ON hives USING (true) WITH CHECK (true);
ALTER TABLE colibri_schema ENABLE ROW LEVEL SECURITY;
ALTER TABLE colibri_schema FORCE ROW LEVEL SECURITY;
CREATE POLICY any_rows ON colibri_schema USING (true) WITH CHECK (true);
