-- Why a step's usage is Holdfast's estimate (its outcome lost with its gateway, the
-- provider's report unusable or missing, its answer cut off midway), what was wrong with
-- the provider's report, and whether its model was charged at pricing.unknown_usd_per_mtok.
-- `estimated` is now set for those too: the step's cost is Holdfast's estimate.
ALTER TABLE steps_v2 ADD COLUMN IF NOT EXISTS usage_estimate LowCardinality(String) DEFAULT if(estimated, 'gateway_lost', '');
ALTER TABLE steps_v2 ADD COLUMN IF NOT EXISTS usage_problem String DEFAULT '';
ALTER TABLE steps_v2 ADD COLUMN IF NOT EXISTS unknown_price Bool DEFAULT false;

-- The view lists the columns as they were when made: made again, it has the new ones.
CREATE OR REPLACE VIEW steps AS SELECT * FROM steps_v2 FINAL;
