<%-- The probe's page: session="false" keeps it from creating one. --%>
<%@ page contentType="text/plain" session="false" %>ok
