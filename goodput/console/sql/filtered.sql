-- The requests the sidebar's filters select; NULL means "any". The other files include it as a subquery.
SELECT * FROM requests
WHERE ($since IS NULL OR ts >= $since) AND ts < $until
  AND ($deployment IS NULL OR deployment = $deployment)
  AND ($tier IS NULL OR tier = $tier)
  AND ($tenant IS NULL OR tenant = $tenant)
