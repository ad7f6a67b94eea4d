-- The mark of the last sync of the model tables (µs; 0: never synced): every insert up to it is in them.
SELECT toUnixTimestamp64Micro(max(synced_to)) AS synced FROM __db__.__synced__ WHERE source = {source:String}
