<?php // sessions.php, reachable from localhost only
// The session files used within session.gc_maxlifetime. session.save_path
// is "DIR", "N;DIR" or "N;MODE;DIR" (N levels of subdirectories); an empty
// DIR (no php.ini, as in the official images) means the system's temporary
// directory.
$parts = explode(';', session_save_path());
$dir = end($parts) ?: sys_get_temp_dir();
$levels = count($parts) > 1 ? (int) $parts[0] : 0;
$max = (int) ini_get('session.gc_maxlifetime');
echo count(array_filter(glob($dir . str_repeat('/*', $levels) . '/sess_*') ?: [], fn($f) => filemtime($f) > time() - $max)), "\n";
