<?php // sessions.php, reachable from localhost only
// The session files used within session.gc_maxlifetime. session.save_path
// may be "N;/dir" or "N;MODE;/dir"; empty (no php.ini, as in the official
// images) means the system's temporary directory.
$parts = explode(';', session_save_path());
$dir = end($parts) ?: sys_get_temp_dir();
$max = (int) ini_get('session.gc_maxlifetime');
echo count(array_filter(glob("$dir/sess_*") ?: [], fn($f) => filemtime($f) > time() - $max)), "\n";
