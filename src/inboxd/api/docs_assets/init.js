// Starts Swagger UI on the document this server describes; kept out of the page so a strict
// Content-Security-Policy (no inline script) still admits it.
window.addEventListener("load", function () {
  window.ui = SwaggerUIBundle({
    url: "openapi.json",
    dom_id: "#swagger-ui",
    deepLinking: true,
    tryItOutEnabled: false,
  });
});
